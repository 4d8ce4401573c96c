"""Verifying a workspace: a task's hidden tests run on a copy of it, and the reward they write.

`verify` opens a fresh sandbox session on a copy of the workspace at WORKDIR, with a fresh copy of
the pristine tests at /tests, empty /logs, a fresh HOME and the task's verifier package layer, and
runs /tests/test.sh under the task's verifier timeout. The doors a workspace could open are shut:
the tests never come from the workspace, bash reads test.sh whole before running it, nothing of
the workspace is on Python's import path, pytest finds plugins and conftest files only under
/tests, and the reward is read only from the fresh /logs/verifier, as a regular file, only when
test.sh ended by itself (and exited 0 for a positive reward). Not shut: code under test runs as
test.sh's user, so it could race the reward's write or change /tests data (Harbor has both).
`read_reward` follows Harbor (reward.json, then reward.txt); missing is 0, a sandbox failure is
`failed`."""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from tempering.records import ExecReason, ExecResult
from tempering.sandbox.request import ExecTag, Mount, Sandbox
from tempering.sandbox.workspace import Workspace
from tempering.tasks.harbor import packages
from tempering.tasks.harbor.folder import TESTS, VERIFIER_LOGS, HarborTask, Limits, load_cached

# What the verifier's environment pins, over the task's own ENV.
HARDENING = {"PYTHONNOUSERSITE": "1", "PYTHONDONTWRITEBYTECODE": "1",
             "PYTEST_ADDOPTS": f"--rootdir={TESTS} --confcutdir={TESTS} -p no:cacheprovider"}
_TAIL = 4000  # characters of test.sh's output kept in a verdict
# test.sh as Harbor runs it (bash /tests/test.sh: $0 and BASH_SOURCE name it), but read whole first.
TEST_COMMAND = ("bash", "-c", '. "$0"', f"{TESTS}/test.sh")


@dataclass(frozen=True)
class Verdict:
    reward: float
    reason: str  # where the reward was read from, or why it is 0
    failed: bool = False  # infrastructure failure: never a training signal
    rewards: Mapping[str, float] = field(default_factory=dict)  # every named reward the tests wrote
    exit_code: int | None = None  # of test.sh
    exec_reason: str = ""  # how test.sh ended (ExecReason value)
    wall_s: float = 0.0
    output: str = ""  # the tail of test.sh's stdout and stderr


def verify(task: HarborTask, sandbox: Sandbox, workspace: Workspace, tag: ExecTag = ExecTag(),
           limits: Limits = Limits()) -> Verdict:
    """Run the task's tests on `workspace` and read the reward they wrote."""
    timeout = min(task.config.verifier_timeout_s, limits.verifier_s)
    layer = packages.ensure(task, packages.layers(task, sandbox.toolchain, build_them=False).verifier, sandbox)
    spec = task.session_spec(workspace, tag, limits, mounts=verifier_mounts(task, limits), wall_s=timeout,
                             max_commands=1, layer=layer)
    spec = dataclasses.replace(spec, env={**spec.env, **verifier_env(task)})
    with sandbox.open_session(spec) as session:
        r = session.run(TEST_COMMAND, time_limit_s=timeout, memory_mb=min(task.config.memory_mb, limits.memory_mb))
        logs = session.collected(VERIFIER_LOGS)
    return judge(r, logs)


def verifier_mounts(task: HarborTask, limits: Limits, tests: Workspace | None = None) -> tuple[Mount, ...]:
    """/tests, writable, holding `tests` (default: the task's), and an empty /logs/verifier."""
    tests = task.tests if tests is None else tests
    return (Mount(TESTS, tests, writable=True, size_mb=max(16, 2 * (task.tests.size >> 20) + 16)),
            Mount(VERIFIER_LOGS, writable=True, collect=True, size_mb=limits.logs_mb))


def verifier_env(task: HarborTask) -> dict[str, str]:
    """What test.sh's environment adds to the task's: its [verifier] env, then our hardening."""
    return {**task.config.verifier_env, **HARDENING}


def verify_folder(folder: str | Path, sandbox: Sandbox, workspace: Workspace, tag: ExecTag = ExecTag(),
                  limits: Limits = Limits()) -> Verdict:
    """`verify` for the task at `folder` (read once per process: `load_cached`)."""
    return verify(load_cached(folder), sandbox, workspace, tag, limits)


def judge(r: ExecResult, logs: Workspace) -> Verdict:
    """The verdict on test.sh's run `r`, which left `logs` in /logs/verifier."""
    common = dict(exit_code=r.exit_code, exec_reason=r.reason.value, wall_s=r.wall_s,
                  output=(r.stdout + r.stderr)[-_TAIL:])
    if r.reason == ExecReason.SANDBOX_ERROR:
        return Verdict(0.0, f"the sandbox failed: {r.error}", failed=True, **common)
    if r.reason not in (ExecReason.OK, ExecReason.NONZERO_EXIT):
        why = {ExecReason.TIMEOUT: f"test.sh timed out after {r.wall_s:.1f} s",
               ExecReason.OOM: "test.sh ran out of memory", ExecReason.OUTPUT_LIMIT: "test.sh's output passed the cap",
               }.get(r.reason, f"test.sh was killed ({r.reason.value}, exit {r.exit_code})")
        return Verdict(0.0, f"{why}: its reward, if any, is not read", **common)
    rewards, why = read_reward(logs.files())
    if not rewards:
        return Verdict(0.0, why, **common)
    if rewards["reward"] > 0 and r.exit_code != 0:
        # test.sh writes its reward last; when that write is blocked (a reward file the code
        # under test made read-only, say) the script fails, and what is in the file is not its.
        return Verdict(0.0, f"test.sh exited {r.exit_code} with a reward of {rewards['reward']} written: not counted",
                       rewards=rewards, **common)
    return Verdict(rewards["reward"], why, rewards=rewards, **common)


def read_reward(files: Mapping[str, bytes]) -> tuple[dict[str, float], str]:
    """({"reward": x, ...}, where it was read) from /logs/verifier's files, or ({}, why there
    is none)."""
    if "reward.json" in files:
        try:
            doc = json.loads(files["reward.json"])
        except (ValueError, UnicodeDecodeError) as e:
            return {}, f"reward.json is not JSON: {e}"
        numbers = {k: float(v) for k, v in doc.items() if _number(v)} if isinstance(doc, dict) else {}
        if "reward" not in numbers and len(numbers) == 1:
            numbers["reward"] = next(iter(numbers.values()))
        if "reward" not in numbers:
            return {}, f"reward.json holds no \"reward\" and not exactly one number: {str(doc)[:200]}"
        return numbers, f"read from {VERIFIER_LOGS}/reward.json"
    if "reward.txt" in files:
        text = files["reward.txt"].decode(errors="replace")
        try:
            value = float(text)
        except ValueError:
            return {}, f"reward.txt does not hold a number: {text[:100]!r}"
        if not math.isfinite(value):
            return {}, f"reward.txt holds {value}, not a finite number"
        return {"reward": value}, f"read from {VERIFIER_LOGS}/reward.txt"
    return {}, f"test.sh wrote no reward ({VERIFIER_LOGS}/reward.txt or reward.json)"


def _number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
