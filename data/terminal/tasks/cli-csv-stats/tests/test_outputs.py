import subprocess
import sys


def run(*args, cwd=None):
    return subprocess.run([sys.executable, "/app/csvstat.py", *map(str, args)], capture_output=True,
                          text=True, cwd=cwd, timeout=20)


def test_stats(tmp_path):
    f = tmp_path / "data.csv"
    f.write_text("name,score,empty\na,1,\nb,2.5,\nc,,\nd,-4,\ne,1e1,\n")
    expected = {"count": "4", "sum": "9.5", "min": "-4.0", "max": "10.0", "mean": "2.375"}
    for stat, value in expected.items():
        r = run(f, "--column", "score", "--stat", stat)
        assert (r.returncode, r.stdout.strip()) == (0, value), (stat, r.stderr)
    assert run(f, "--column", "score").stdout.strip() == "2.375"
    assert run(f, "--column", "empty", "--stat", "count").stdout.strip() == "0"
    assert run(f, "--column", "empty", "--stat", "max").stdout.strip() == "nan"


def test_rounding_and_delimiter(tmp_path):
    f = tmp_path / "semi.csv"
    f.write_text("x;y\n1;0\n2;0\n2;1\n")
    assert run(f, "--column", "x", "--delimiter", ";").stdout.strip() == "1.6667"
    assert run(f, "--column", "y", "--delimiter", ";", "--stat", "mean").stdout.strip() == "0.3333"


def test_errors(tmp_path):
    f = tmp_path / "bad.csv"
    f.write_text("a,b\n1,2\n3,x\n")
    r = run(f, "--column", "zzz")
    assert r.returncode == 2 and "unknown column" in r.stderr and r.stdout == ""
    r = run(f, "--column", "b")
    assert r.returncode == 3 and "3" in r.stderr and r.stdout == ""
    assert run(f).returncode == 2
    assert run(f, "--column", "a", "--stat", "median").returncode == 2
