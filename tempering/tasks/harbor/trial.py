"""A trial: a task's environment set up, a solution script run in it, the result verified.

This is how a task folder is checked without a model: the oracle (`solution/solve.sh`) must
score 1 and doing nothing must score 0. As Harbor runs it, the solution folder appears
read-only at /solution and `bash /solution/solve.sh` runs with WORKDIR as its working
directory, in a session with the task's agent timeout; verification then runs on a copy of
the workspace it left (`verifier.verify`). `run_trial` returns a `Trial` whatever the
solution did; it raises `Unrunnable` for a folder that cannot run (with `SetupFailed` for a
RUN line that failed). `check_needs` says which of a task's needs the toolchain lacks.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from tempering.records import ExecReason
from tempering.sandbox.request import ExecTag, Sandbox
from tempering.sandbox.toolchain import Toolchain
from tempering.sandbox.workspace import Workspace
from tempering.tasks.harbor.build import build
from tempering.tasks.harbor.folder import SOLUTION, HarborTask, Limits, Unrunnable, read_only
from tempering.tasks.harbor.verifier import Verdict, verify

NOOP = Workspace.from_files({"solve.sh": b"#!/bin/bash\n# does nothing: the workspace as the environment left it\n"})


@dataclass(frozen=True)
class Trial:
    task: str
    reward: float
    reason: str
    failed: bool  # infrastructure failure (a sandbox error), not the solution's doing
    solution_reason: str  # how solve.sh ended (ExecReason value)
    solution_exit: int | None
    setup_s: float
    solution_s: float
    verdict: Verdict

    def to_json(self) -> dict:
        v = self.verdict
        return {"task": self.task, "reward": self.reward, "reason": self.reason, "failed": self.failed,
                "setup_s": round(self.setup_s, 3),
                "solution": {"reason": self.solution_reason, "exit_code": self.solution_exit,
                             "wall_s": round(self.solution_s, 3)},
                "verifier": {"reason": v.exec_reason, "exit_code": v.exit_code, "wall_s": round(v.wall_s, 3),
                             "rewards": dict(v.rewards), "output_tail": v.output[-1000:]}}


def check_needs(task: HarborTask, toolchain: Toolchain | None) -> list[str]:
    """The task's needs the toolchain does not meet, as phrases (empty: all met)."""
    n = task.needs
    if toolchain is None:
        wanted = [*n.python, *n.apt, *n.commands]
        return [f"{w} (no toolchain: build it with scripts/setup.sh)" for w in wanted]
    return toolchain.missing(n.python_names, n.apt_names, n.commands)


def run_trial(sandbox: Sandbox, task: HarborTask, solution: Workspace | None = None, limits: Limits = Limits(),
              tag: ExecTag = ExecTag(), workspace: Workspace | None = None) -> Trial:
    """Set `task` up (unless `workspace` is its environment, built already), run `solution` (a
    folder with solve.sh; default: the task's oracle) as Harbor would, and verify. Raises
    Unrunnable when the folder cannot run."""
    solution = solution if solution is not None else task.solution
    if solution is None or solution.read("solve.sh") is None:
        raise Unrunnable(f"{task.path}: no solution/solve.sh to run")
    t0 = time.monotonic()
    workspace = workspace if workspace is not None else build(task, sandbox, limits, tag)
    t1 = time.monotonic()
    spec = task.session_spec(workspace, tag, limits, mounts=(read_only(SOLUTION, solution),), max_commands=1)
    with sandbox.open_session(spec) as session:
        r = session.run(("bash", f"{SOLUTION}/solve.sh"), memory_mb=min(task.config.memory_mb, limits.memory_mb))
        workspace = session.workspace
    if r.reason == ExecReason.SANDBOX_ERROR:
        verdict = Verdict(0.0, f"the sandbox failed running the solution: {r.error}", failed=True)
    else:
        verdict = verify(task, sandbox, workspace, tag, limits)
    return Trial(task.id, verdict.reward, verdict.reason, verdict.failed, r.reason.value, r.exit_code,
                 t1 - t0, r.wall_s, verdict)
