"""`tempering sandbox run`: files from --workdir, limits and env from flags, one JSON object out."""

from __future__ import annotations

import base64
import json

from sandbox_helpers import needs_bwrap
from tempering.sandbox import cli, output


@needs_bwrap
def test_sandbox_run_prints_the_result_as_json(tmp_path, capsys):
    (tmp_path / "main.py").write_text("import os\nprint(os.environ['GREETING'], open('data/in.txt').read())\n"
                                      "open('out.txt', 'w').write('written')\n")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "in.txt").write_text("world")
    (tmp_path / "link").symlink_to("/etc/passwd")
    rc = cli.main(["sandbox", "run", "--time-limit", "5", "--memory-mb", "128", "--pids", "16",
                   "--workdir", str(tmp_path), "--env", "GREETING=hello", "--collect", "out.txt",
                   "--collect", "link", "--", "python3", "main.py"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert out["reason"] == "ok" and out["exit_code"] == 0 and out["stdout"] == "hello world\n"
    assert out["start"] == "cold" and base64.b64decode(out["files"]["out.txt"]) == b"written"
    assert "link" not in out["files"]  # the symlink was never copied in


@needs_bwrap
def test_sandbox_run_reports_a_timeout(capsys):
    rc = cli.main(["sandbox", "run", "--time-limit", "0.3", "--", "sleep", "10"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["reason"] == "timeout" and out["exit_code"] == -9


@needs_bwrap
def test_sandbox_run_takes_the_limits_it_is_not_given_from_the_config(capsys):
    rc = cli.main(["sandbox", "run", "--set", "sandbox.time_limit_s=0.3", "--set", "sandbox.output_limit_bytes=10",
                   "--", "sh", "-c", "echo 0123456789abcdef; sleep 10"])
    out = json.loads(capsys.readouterr().out)  # past the cap it runs on, to its deadline: 5 bytes of head, 5 of tail
    assert rc == 0 and out["reason"] == "timeout" and out["truncated"], out
    assert out["stdout"] == "01234" + output.marker(7, 10).decode() + "cdef\n", out
    rc = cli.main(["sandbox", "run", "--set", "sandbox.time_limit_s=0.3", "--", "sleep", "10"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["reason"] == "timeout" and out["wall_s"] < 3, out


def test_sandbox_run_without_a_command_is_a_usage_error(capsys):
    assert cli.main(["sandbox", "run"]) == 2
    assert "after --" in capsys.readouterr().err
