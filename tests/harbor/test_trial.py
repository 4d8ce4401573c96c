"""Task folders run end to end in the sandbox: the oracle scores 1 and a no-op 0, set-up that needs
the network or a missing package is skipped with the reason, the importer sorts folders into
runnable and skipped, an episode's session and verification through the API the agent loop
uses, and `tempering tasks run-folder` / `import` from the command line (exit codes, JSON)."""

from __future__ import annotations

import json

import pytest

from harbor_helpers import TB_TEST_SH, make_task, needs_sandbox
from tempering.cli import main
from tempering.sandbox import ExecTag
from tempering.sandbox.toolchain import Toolchain, default_dir
from tempering.tasks import harbor

pytestmark = needs_sandbox


def test_the_oracle_scores_one_and_a_noop_zero(sandbox, tmp_path):
    task = harbor.load(make_task(tmp_path))
    oracle = harbor.run_trial(sandbox, task)
    assert (oracle.reward, oracle.failed, oracle.solution_reason) == (1.0, False, "ok"), oracle.verdict.output
    assert "2 passed" in oracle.verdict.output and oracle.verdict.rewards == {"reward": 1.0}
    noop = harbor.run_trial(sandbox, task, harbor.NOOP)
    assert (noop.reward, noop.failed) == (0.0, False) and "1 failed, 1 passed" in noop.verdict.output


def test_an_episode_session_and_its_verification(sandbox, tmp_path):
    """What the agent loop does: a session from the built environment, commands at WORKDIR, the
    tests invisible to it, then verification of the workspace it left."""
    folder = make_task(tmp_path)
    spec = harbor.setup_session_spec(folder, sandbox, tag=ExecTag(sample="answer/0"))
    with sandbox.open_session(spec) as s:
        r = s.run(("bash", "-c", "pwd; cat answer.py; ls /tests 2>&1; echo 'print(42)' > answer.py"))
        assert r.ok and r.stdout.startswith("/app\nprint(0)\nls: cannot access '/tests'"), r
        verdict = harbor.verify_folder(folder, sandbox, s.workspace, ExecTag(sample="answer/0"))
        assert verdict.reward == 1.0 and s.workspace.read("answer.py") == b"print(42)\n"


@pytest.mark.parametrize("run, why", [
    ("curl -fsS https://pypi.org/simple/ -o index.html", "Could not resolve host"),
    ("apt-get update && apt-get install -y definitely-not-a-package", "Unable to locate package"),
])
def test_set_up_that_needs_the_network_is_skipped_with_the_reason(sandbox, tmp_path, run, why):
    task = harbor.load(make_task(tmp_path, dockerfile=f"FROM python:3.13-slim\nWORKDIR /app\nRUN {run}\n"))
    with pytest.raises(harbor.SetupFailed, match=f"Dockerfile line 3 .*failed.*{why}") as e:
        harbor.build(task, sandbox)
    assert not e.value.infrastructure


def test_a_package_pypi_does_not_give_is_one_line_before_any_run(sandbox, tmp_path, local_index):
    task = harbor.load(make_task(tmp_path, dockerfile="FROM x\nWORKDIR /app\nRUN pip install not-on-pypi==1.0\n"))
    with pytest.raises(harbor.Unrunnable, match="needs Python packages the toolchain lacks .not-on-pypi==1.0. and "
                                                "their layer could not be built: pip could not install") as e:
        harbor.build(task, sandbox)
    assert "\n" not in str(e.value)


def test_copied_folders_outside_the_workdir_and_a_writable_tests_folder(sandbox, tmp_path):
    """COPY to /data: every command of the task sees it (RUN lines, the solution, the tests).
    /tests is a fresh writable copy: test.sh may build there."""
    dockerfile = "FROM x\nWORKDIR /app\nCOPY data /data\nRUN cp /data/in.txt seen-at-build.txt\n"
    test_sh = "gcc -x c -o /tests/helper - <<< 'int main(void) { return 0; }' && /tests/helper && \\\n" + TB_TEST_SH
    tests = ("from pathlib import Path\n\ndef test_data():\n    assert Path('/app/seen-at-build.txt').read_text() == "
             "Path('/data/in.txt').read_text() == Path('/app/copied.txt').read_text() == 'input\\n'\n")
    folder = make_task(tmp_path, dockerfile=dockerfile, test_sh=test_sh, tests=tests,
                       solve="#!/bin/bash\ncp /data/in.txt copied.txt\n", context={"data/in.txt": "input\n"})
    task = harbor.load(folder)
    assert harbor.run_trial(sandbox, task).reward == 1.0
    assert harbor.run_trial(sandbox, task, harbor.NOOP).reward == 0.0


def test_the_importer_lists_runnable_and_skipped_folders_with_reasons(sandbox, tmp_path, local_index):
    make_task(tmp_path / "good")
    make_task(tmp_path / "net", dockerfile="FROM x\nWORKDIR /app\nRUN curl -fsS https://example.com\n")
    make_task(tmp_path / "multi", dockerfile="FROM a AS b\nFROM c\nWORKDIR /app\n")
    make_task(tmp_path / "lacks", toml='[tempering]\npython_packages = ["no-such-package-x"]\n')
    make_task(tmp_path / "both", dockerfile="FROM x\nWORKDIR /app\nRUN apt-get install -y no-such-deb && "
                                            "pip install tempering-tiny==2.0\n")  # every cause named, nothing fetched
    make_task(tmp_path / "weak", tests="def test_nothing():\n    pass\n")  # doing nothing passes
    make_task(tmp_path / "wrong", solve="#!/bin/bash\ntrue\n")  # its oracle fails
    (tmp_path / "not-a-task").mkdir()
    results = {r.path.parent.name: r for r in harbor.scan([tmp_path], Toolchain.load(default_dir()), sandbox,
                                                           oracle=True, noop=True)}
    assert set(results) == {"good", "net", "multi", "lacks", "both", "weak", "wrong"}
    assert results["good"].runnable and (results["good"].oracle, results["good"].noop) == (1.0, 0.0)
    why = {name: r.reason for name, r in results.items() if not r.runnable}
    assert "Could not resolve host" in why["net"] and "multi-stage" in why["multi"]
    assert "Python packages the toolchain lacks (no-such-package-x)" in why["lacks"]
    assert why["both"] == ("needs what the toolchain lacks: Debian package no-such-deb; and Python packages to "
                           "fetch into a layer: tempering-tiny==2.0")
    assert "doing nothing scores 1.0" in why["weak"] and "the oracle scores 0.0" in why["wrong"]


def run_cli(capsys, *argv):
    code = main(["tasks", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_run_folder_prints_the_reward_and_exits_zero_whatever_it_is(capsys, tmp_path):
    folder = make_task(tmp_path)
    code, out, err = run_cli(capsys, "run-folder", str(folder), "--json")
    doc = json.loads(out)
    assert code == 0 and doc["reward"] == 1.0 and doc["status"] == "verified" and "reward.txt" in doc["reason"]
    noop = tmp_path / "noop.sh"
    noop.write_text("#!/bin/bash\n")
    code, out, err = run_cli(capsys, "run-folder", str(folder), "--solution", str(noop))
    assert code == 0 and out.startswith("answer: reward 0.0 (read from /logs/verifier/reward.txt)"), out


def test_run_folder_exits_nonzero_with_one_line_for_a_folder_it_cannot_run(capsys, tmp_path):
    bad = make_task(tmp_path, name="bad", dockerfile="FROM x\nWORKDIR /app\nCOPY --from=builder /a /app/\n")
    code, out, err = run_cli(capsys, "run-folder", str(bad), "--json")
    assert code == 2 and json.loads(out)["status"] == "skipped" and "COPY --from" in json.loads(out)["reason"]
    assert err.count("\n") == 1 and err.startswith("error: ") and "COPY --from" in err
    net = make_task(tmp_path, name="net", dockerfile="FROM x\nWORKDIR /app\nRUN curl -fsS https://example.com\n")
    code, _, err = run_cli(capsys, "run-folder", str(net))
    assert code == 2 and "Could not resolve host" in err and err.count("\n") == 1
    code, _, err = run_cli(capsys, "run-folder", str(tmp_path / "missing"))
    assert code == 2 and "not a directory" in err


def test_import_prints_one_json_line_per_folder(capsys, tmp_path):
    make_task(tmp_path / "a")
    make_task(tmp_path / "b", dockerfile="FROM x\nWORKDIR /\n")
    code, out, err = run_cli(capsys, "import", str(tmp_path), "--json", "--no-build")
    rows = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and [r["runnable"] for r in rows] == [True, False] and "1 runnable, 1 skipped" in err
    assert rows[0]["needs"]["commands"] == ["pytest"] and "final WORKDIR is /" in rows[1]["reason"]
    code, _, err = run_cli(capsys, "import", str(tmp_path / "a" / "answer" / "tests"))
    assert code == 2 and "no task folders" in err
    assert main(["tasks"]) == 0  # the domain listing still works
