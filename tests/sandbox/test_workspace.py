"""Workspaces and the archive code under them, on the host: what an archive keeps, and every
extraction attack refused, judged by what appears on disk (hand-built hostile archives)."""

from __future__ import annotations

import io
import os
import stat
import tarfile

import pytest

from tempering.sandbox.guest import archive
from tempering.sandbox.workspace import Workspace


def hostile(*members: tuple[str, str, str]) -> bytes:
    """An archive of (name, type, link-or-content) members, built by hand (tarfile writes
    whatever it is told)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, kind, extra in members:
            info = tarfile.TarInfo(name)
            if kind == "file":
                data = extra.encode()
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
                continue
            info.type = {"dir": tarfile.DIRTYPE, "symlink": tarfile.SYMTYPE, "hardlink": tarfile.LNKTYPE,
                         "chardev": tarfile.CHRTYPE, "fifo": tarfile.FIFOTYPE}[kind]
            info.linkname = extra
            if kind == "chardev":
                info.devmajor, info.devminor = 1, 3  # /dev/null's numbers
            tar.addfile(info)
    return buf.getvalue()


ATTACKS = {  # each given the directory the attack aims at
    "absolute path": lambda out: hostile((f"{out}/evil", "file", "x")),
    "dot-dot": lambda out: hostile(("a/../../OUTSIDE/evil", "file", "x")),
    "symlink then a file through it": lambda out: hostile(("link", "symlink", str(out)), ("link/evil", "file", "x")),
    "hard link out": lambda out: hostile(("passwd", "hardlink", "/etc/passwd")),
    "device node": lambda out: hostile(("null", "chardev", "")),
    "fifo": lambda out: hostile(("pipe", "fifo", "")),
    "a name twice": lambda out: hostile(("a", "file", "1"), ("a", "file", "2")),
    "a file through a file": lambda out: hostile(("a", "file", "1"), ("a/b", "file", "2")),
}


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_extraction_attacks_are_refused_and_write_nothing_outside(attack, tmp_path):
    root, outside = tmp_path / "root", tmp_path / "OUTSIDE"
    root.mkdir()
    outside.mkdir()
    data = ATTACKS[attack](outside)
    with pytest.raises(ValueError, match="archive member"):
        archive.extract(str(root), data)
    with pytest.raises(ValueError, match="archive member"):
        Workspace(data)  # the host refuses it before any sandbox sees it
    assert list(outside.iterdir()) == [] and not (tmp_path / "evil").exists()
    for path in root.rglob("*"):  # what was written before the refusal stays inside, and is plain
        assert path.is_symlink() or path.is_dir() or path.is_file(), path


def test_a_symlink_already_on_disk_is_not_followed(tmp_path):
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (root / "d").symlink_to(outside)
    with pytest.raises(ValueError, match="archive member 'd': Not a directory"):
        archive.extract(str(root), Workspace.from_files({"d/f": b"x"}).archive)
    assert list(outside.iterdir()) == []


def test_modes_directories_and_symlinks_survive_a_round_trip(tmp_path):
    src = tmp_path / "src"
    (src / "bin").mkdir(parents=True)
    (src / "bin" / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (src / "bin" / "run.sh").chmod(0o755)
    (src / "empty").mkdir()
    (src / "locked").mkdir(mode=0o500)
    (src / "secret").write_text("s")
    (src / "secret").chmod(0o600)
    (src / "setuid").write_text("x")
    (src / "setuid").chmod(0o4755)
    (src / "link").symlink_to("bin/run.sh")
    (src / "abs").symlink_to("/etc/passwd")
    os.mkfifo(src / "fifo")
    ws = Workspace.from_dir(src)
    assert set(ws.names()) == {"bin", "bin/run.sh", "empty", "locked", "secret", "setuid", "link", "abs"}
    dst = tmp_path / "dst"
    dst.mkdir()
    archive.extract(str(dst), ws.archive)
    mode = lambda p: stat.S_IMODE(os.lstat(p).st_mode)  # noqa: E731
    assert mode(dst / "bin" / "run.sh") == 0o755 and mode(dst / "secret") == 0o600
    assert mode(dst / "setuid") == 0o755  # permission bits only: no setuid bit from an archive
    assert mode(dst / "locked") == 0o500 and (dst / "empty").is_dir()
    assert os.readlink(dst / "link") == "bin/run.sh" and os.readlink(dst / "abs") == "/etc/passwd"
    assert (dst / "bin" / "run.sh").read_text() == "#!/bin/sh\necho hi\n"
    assert ws.read("link") is None and ws.read("bin") is None  # regular files only, symlinks never followed
    assert ws.read("bin/run.sh") == b"#!/bin/sh\necho hi\n" and ws.size == len("#!/bin/sh\necho hi\n") + 2


def test_host_side_edits():
    ws = Workspace.from_files({"a/b.txt": b"1"})
    assert ws.names() == ["a", "a/b.txt"] and ws.kind("a") == "dir"
    ws2 = ws.write("a/b.txt", b"22", 0o600).write("./c.txt", b"3").mkdir("d/e")
    assert ws.read("a/b.txt") == b"1"  # immutable: the original is unchanged
    assert ws2.read("a/b.txt") == b"22" and ws2.mode("a/b.txt") == 0o600 and ws2.read("c.txt") == b"3"
    assert ws2.kind("d/e") == "dir" and ws2.size == 3
    merged = Workspace().merge("sub", ws2)
    assert merged.read("sub/a/b.txt") == b"22" and merged.kind("sub") == "dir"
    with pytest.raises(ValueError, match="regular file 'c.txt'"):
        ws2.write("c.txt/x", b"")  # a file cannot hold files
    for bad in ("/abs", "../x", "a//b", ""):
        with pytest.raises(ValueError):
            ws2.write(bad, b"")


def test_packing_stops_at_its_limit_and_skips_special_files(tmp_path):
    (tmp_path / "big").write_bytes(b"x" * 100_000)
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(ValueError, match="exceeds its limit of 50000"):
        archive.pack(str(tmp_path), 50_000)
    data, skipped = archive.pack(str(tmp_path), 200_000)
    assert skipped == {"fifo": "not a regular file, directory or symlink"}
    assert Workspace(data).read("big") == b"x" * 100_000


def test_packing_a_deep_tree_stops_descending(tmp_path):
    d = tmp_path
    for _ in range(archive.MAX_DEPTH + 5):
        d = d / "d"
        d.mkdir()
    data, skipped = archive.pack(str(tmp_path), 10 << 20)
    assert len(skipped) == 1 and "deeper than" in next(iter(skipped.values()))
    assert max(n.count("/") for n in Workspace(data).names()) == archive.MAX_DEPTH - 1


def test_a_rewrite_of_the_same_length_is_newer_even_within_a_second():
    """Python's .pyc files trust a source's mtime and size: an agent's one-character fix written
    host-side in the second its file was built must still look changed, or the old bytecode
    runs (and a correct fix scores 0)."""
    import tarfile

    from tempering.sandbox.workspace import Workspace

    def mtime(ws, name):
        with tarfile.open(fileobj=io.BytesIO(ws.archive)) as tar:
            return tar.getmember(name).mtime

    ws = Workspace.from_files({"calc.py": b"return a - b"})
    fixed = ws.write("calc.py", b"return a + b")
    again = fixed.write("calc.py", b"return a * b")
    assert mtime(ws, "calc.py") < mtime(fixed, "calc.py") < mtime(again, "calc.py")
