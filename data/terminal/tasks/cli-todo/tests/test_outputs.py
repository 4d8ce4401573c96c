import subprocess
import sys


def todo(tmp_path, *args, db=None):
    cmd = [sys.executable, "/app/todo.py"]
    if db:
        cmd += ["--db", str(db)]
    return subprocess.run(cmd + list(args), capture_output=True, text=True, cwd=tmp_path, timeout=20)


def test_workflow(tmp_path):
    db = tmp_path / "list.json"
    assert todo(tmp_path, "add", "buy", "milk", db=db).stdout == "added 1\n"
    assert todo(tmp_path, "add", "write report", db=db).stdout == "added 2\n"
    assert todo(tmp_path, "add", "call", "bob", db=db).stdout == "added 3\n"
    r = todo(tmp_path, "done", "2", db=db)
    assert (r.returncode, r.stdout) == (0, "done 2\n")
    assert todo(tmp_path, "list", db=db).stdout == "1. buy milk\n3. call bob\n"
    assert todo(tmp_path, "list", "--all", db=db).stdout == "1. buy milk\n2. [x] write report\n3. call bob\n"
    assert todo(tmp_path, "remove", "3", db=db).stdout == "removed 3\n"
    assert todo(tmp_path, "add", "again", db=db).stdout == "added 4\n"
    assert todo(tmp_path, "list", db=db).stdout == "1. buy milk\n4. again\n"


def test_default_db_and_empty(tmp_path):
    r = todo(tmp_path, "list")
    assert (r.returncode, r.stdout) == (0, "")
    todo(tmp_path, "add", "x")
    assert (tmp_path / "todo.json").is_file()
    assert todo(tmp_path, "list").stdout == "1. x\n"


def test_errors(tmp_path):
    r = todo(tmp_path, "done", "7")
    assert r.returncode == 1 and r.stderr.strip() == "error: no item 7"
    r = todo(tmp_path, "remove", "1")
    assert r.returncode == 1 and r.stderr.strip() == "error: no item 1"
    assert todo(tmp_path).returncode == 2
    assert todo(tmp_path, "frobnicate").returncode == 2
    assert todo(tmp_path, "done", "abc").returncode == 2
