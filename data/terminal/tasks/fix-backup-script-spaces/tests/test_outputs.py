import os
import subprocess


def run(src, dest):
    return subprocess.run(["bash", "/app/backup.sh", str(src), str(dest)], capture_output=True,
                          text=True, timeout=20, env={**os.environ, "LC_ALL": "C"})


def make(src, files):
    src.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        (src / name).write_text(content)


def check(src, dest, files, out):
    txt = sorted((n for n in files if n.endswith(".txt")), key=lambda s: s.encode())
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"copied {len(txt)} files"
    assert sorted(os.listdir(dest)) == sorted(txt + ["MANIFEST"])
    for n in txt:
        assert (dest / n).read_text() == files[n]
    expected = "".join(f"{n}\t{len(files[n].encode())}\n" for n in txt)
    assert (dest / "MANIFEST").read_text() == expected


def test_plain(tmp_path):
    files = {"a.txt": "alpha\n", "b.txt": "bb", "c.log": "no"}
    make(tmp_path / "src", files)
    check(tmp_path / "src", tmp_path / "out", files, run(tmp_path / "src", tmp_path / "out"))


def test_spaces_and_odd_names(tmp_path):
    files = {"my notes.txt": "hello world\n", "-dash.txt": "d", "star*.txt": "**",
             "  two  spaces .txt": "x" * 300, "keep.md": "m", "ünïcode.txt": "é"}
    src, dest = tmp_path / "source dir", tmp_path / "back up" / "dest dir"
    make(src, files)
    (src / "sub dir.txt").mkdir()
    check(src, dest, files, run(src, dest))


def test_empty(tmp_path):
    src, dest = tmp_path / "empty src", tmp_path / "empty dest"
    src.mkdir()
    check(src, dest, {}, run(src, dest))
