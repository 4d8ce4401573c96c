"""What the host hands a sandbox and what it keeps of a run: only world-readable files are
staged into the sandbox's /etc, the telemetry log holds neither a request's files nor its
source, and a log that cannot be written never fails a run."""

from __future__ import annotations

import json
import os

from tempering.records import ExecReason, ExecResult
from tempering.sandbox import ExecRequest
from tempering.sandbox.bwrap import _copy_public
from tempering.sandbox.telemetry import FILENAME, ExecLog


def test_only_world_readable_files_are_staged(tmp_path):
    src, dst = tmp_path / "etc", tmp_path / "staged"
    (src / "ssl" / "private").mkdir(parents=True)
    (src / "ssl" / "cert.pem").write_text("public")
    (src / "ssl" / "key.pem").write_text("secret")
    (src / "ssl" / "private" / "inside.pem").write_text("secret")
    os.chmod(src / "ssl" / "cert.pem", 0o644)
    os.chmod(src / "ssl" / "key.pem", 0o640)  # readable by a group, not by everyone
    os.chmod(src / "ssl" / "private", 0o750)
    os.chmod(src / "ssl" / "private" / "inside.pem", 0o644)  # public, in a directory that is not
    os.symlink("/etc/shadow", src / "ssl" / "link")
    _copy_public(src, dst)
    assert sorted(p.name for p in (dst / "ssl").iterdir()) == ["cert.pem", "link"]
    assert (dst / "ssl" / "cert.pem").read_text() == "public"
    assert os.readlink(dst / "ssl" / "link") == "/etc/shadow"  # a symlink stays one, its target unread


SOURCE_MARK, FILE_MARK, STDIN_MARK = "source-7f3a", "file-c91e", "stdin-52bd"


def test_the_log_holds_sizes_and_names_not_contents(tmp_path):
    req = ExecRequest(command=("python3", "-c", f"print('{SOURCE_MARK}')"), files={"main.py": FILE_MARK.encode()},
                      stdin=STDIN_MARK.encode())
    result = ExecResult(reason=ExecReason.OK, exit_code=0, stdout="out", files={"out.txt": b"collected"})
    log = ExecLog(tmp_path)
    log.write("bwrap", req, result)
    log.close()
    text = (tmp_path / FILENAME).read_text()
    assert not any(mark in text for mark in (SOURCE_MARK, FILE_MARK, STDIN_MARK, "collected")), text
    line = json.loads(text)
    assert line["program"] == "python3" and line["argc"] == 3 and line["files"] == ["out.txt"]
    assert line["request_bytes"] == len(FILE_MARK) + len(STDIN_MARK)


def test_a_log_that_cannot_be_written_warns_once_and_never_fails_a_run(tmp_path, capsys):
    (tmp_path / FILENAME).symlink_to("/dev/full")  # every write fails with ENOSPC
    log = ExecLog(tmp_path)
    result = ExecResult(reason=ExecReason.OK, exit_code=0)
    for _ in range(3):
        log.write("bwrap", ExecRequest(command=("true",)), result)
    log.close()
    assert capsys.readouterr().err.count("cannot write") == 1
