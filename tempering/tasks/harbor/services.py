"""A task's own solution and its tests in one job, so that the services it starts serve them.

Each sandbox command's processes end with it, so a server that solve.sh starts in the
background is gone before the tests, in their fresh sandbox, can talk to it. For a task's own
oracle that left processes running (`ExecResult.lingering`), `trial` runs it again here, as
Harbor runs it in one container: one job on the built environment that runs solve.sh under
the agent timeout (its output to /logs/agent/solve.log), then receives the tests (their
archive on its stdin, read only once solve.sh has ended, into an empty writable /tests) and
runs test.sh with the verifier's environment, while what solve.sh started keeps running. The
layer holds both the environment's packages and the verifier's (`packages`). A solution from
elsewhere never runs this way: its processes would share the job with the tests.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from tempering.records import ExecReason
from tempering.sandbox.request import ExecTag, Sandbox
from tempering.sandbox.workspace import Workspace
from tempering.tasks.harbor import packages
from tempering.tasks.harbor.folder import AGENT_LOGS, SOLUTION, TESTS, VERIFIER_LOGS, HarborTask, Limits, read_only
from tempering.tasks.harbor.verifier import TEST_COMMAND, Verdict, judge, verifier_env, verifier_mounts

# $1: the agent timeout in seconds; the rest: KEY=VALUE pairs test.sh gets over the task's ENV.
_SCRIPT = f"""
agent_s=$1; shift
start=$(date +%s%N)
timeout --kill-after=5 "$agent_s" bash {SOLUTION}/solve.sh </dev/null >{AGENT_LOGS}/solve.log 2>&1
echo "$? $(( ($(date +%s%N) - start) / 1000000 ))" >{AGENT_LOGS}/solve.status
tar -x -C {TESTS} -f - || exit 125
exec env "$@" {shlex.join(TEST_COMMAND)}
"""
_TIMED_OUT = 124  # timeout(1)'s exit status when it ended the command


@dataclass(frozen=True)
class Run:
    verdict: Verdict
    solution_reason: str  # how solve.sh ended (ExecReason value)
    solution_exit: int | None
    solution_s: float


def run(sandbox: Sandbox, task: HarborTask, workspace: Workspace, limits: Limits, tag: ExecTag = ExecTag()) -> Run:
    """Run the task's own solve.sh, then its tests, in one job on the built `workspace`."""
    agent_s = min(task.config.agent_timeout_s, limits.agent_s)
    wall = agent_s + min(task.config.verifier_timeout_s, limits.verifier_s) + 10
    mounts = (read_only(SOLUTION, task.solution), *verifier_mounts(task, limits, tests=Workspace()))
    spec = task.session_spec(workspace, tag, limits, mounts=mounts, wall_s=wall, max_commands=1,
                             layer=packages.services_layer(task, sandbox))
    pairs = [f"{k}={v}" for k, v in verifier_env(task).items()]
    with sandbox.open_session(spec) as session:
        r = session.run(("bash", "-c", _SCRIPT, "services", f"{agent_s:g}", *pairs), stdin=task.tests.archive,
                        time_limit_s=wall, memory_mb=min(task.config.memory_mb, limits.memory_mb))
        logs, status = session.collected(VERIFIER_LOGS), session.collected(AGENT_LOGS).read("solve.status")
    return Run(judge(r, logs), *_solution(status))


def _solution(status: bytes | None) -> tuple[str, int | None, float]:
    """(how solve.sh ended, its exit status, its seconds) from the script's solve.status."""
    try:
        code, ms = (int(x) for x in (status or b"").split())
    except ValueError:
        return "not run", None, 0.0  # the job ended before solve.sh did (its deadline, a sandbox failure)
    reason = ExecReason.TIMEOUT if code == _TIMED_OUT else ExecReason.OK if code == 0 else ExecReason.NONZERO_EXIT
    return reason.value, code, ms / 1000
