"""Safe collection of result files on the host's own filesystem: symlinks never followed,
FIFOs and devices skipped without blocking, sizes capped, bad names refused."""

from __future__ import annotations

import os
import threading

import pytest

from tempering.sandbox.guest.collect import check_name, collect


def test_regular_files_and_nested_paths(tmp_path):
    (tmp_path / "a.txt").write_bytes(b"alpha")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.txt").write_bytes(b"beta")
    files, skipped = collect(str(tmp_path), ["a.txt", "sub/b.txt", "missing.txt"], 1000)
    assert files == {"a.txt": b"alpha", "sub/b.txt": b"beta"}
    assert skipped["missing.txt"].startswith("ENOENT")


def test_symlinks_are_never_followed(tmp_path):
    secret = tmp_path.parent / f"{tmp_path.name}-outside.txt"
    secret.write_bytes(b"outside")
    os.symlink(secret, tmp_path / "link.txt")
    os.symlink(tmp_path.parent, tmp_path / "linkdir")
    files, skipped = collect(str(tmp_path), ["link.txt", f"linkdir/{secret.name}"], 1000)
    assert files == {}
    assert "not a regular file" in skipped["link.txt"]
    assert "symlink" in skipped[f"linkdir/{secret.name}"]


def test_fifos_and_devices_are_skipped_without_blocking(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    os.symlink("/dev/zero", tmp_path / "zero")
    names = ["fifo", "zero"]
    if os.geteuid() == 0:
        os.mknod(tmp_path / "null", 0o666 | 0o020000, os.makedev(1, 3))
        names.append("null")
    done = []  # a FIFO opened for reading would wait for a writer forever: run it where that shows
    worker = threading.Thread(target=lambda: done.append(collect(str(tmp_path), names, 1000)), daemon=True)
    worker.start()
    worker.join(30)  # a hang guard only: collecting three names takes microseconds
    assert done, "collect blocked"
    files, skipped = done[0]
    assert files == {} and set(skipped) == set(names)


def test_sizes_are_capped_in_total(tmp_path):
    (tmp_path / "one").write_bytes(b"x" * 600)
    (tmp_path / "two").write_bytes(b"y" * 600)
    (tmp_path / "small").write_bytes(b"z" * 10)
    files, skipped = collect(str(tmp_path), ["one", "two", "small"], 1000)
    assert files == {"one": b"x" * 600, "small": b"z" * 10}
    assert "larger than" in skipped["two"]


@pytest.mark.parametrize("name", ["/etc/passwd", "../x", "a/../../x", "", "a//b", "./a"])
def test_names_that_could_leave_the_workspace_are_refused(name):
    with pytest.raises(ValueError):
        check_name(name)
