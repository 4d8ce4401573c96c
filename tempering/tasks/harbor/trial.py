"""A trial: a task's environment set up, a solution script run in it, the result verified.

This is how a task folder is checked without a model: the oracle (`solution/solve.sh`) must
score 1 and doing nothing must score 0. As Harbor runs it, the solution folder appears
read-only at /solution and `bash /solution/solve.sh` runs with WORKDIR as its working
directory, in a session with the task's agent timeout (its one command may use all of it)
and environment layer; verification then runs on a copy of the workspace it left
(`verifier.verify`). When the task's own oracle left processes running (a server the tests
talk to), they died with its command: it runs again with its tests in one job (`services`).
A solution from elsewhere never does (its processes would see the tests). `run_trial`
returns a `Trial` whatever the solution did; it raises `Unrunnable` for a folder that cannot
run (with `SetupFailed` for a RUN line that failed). `check_needs` says which of a task's
Debian packages and commands the toolchain lacks (its Python packages come in layers).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from tempering.records import ExecReason
from tempering.sandbox.request import ExecTag, Sandbox
from tempering.sandbox.toolchain import Toolchain
from tempering.sandbox.workspace import Workspace
from tempering.tasks.harbor import packages, services
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
    services: bool = False  # the solution's processes served the tests (one job: `services`)

    def to_json(self) -> dict:
        v = self.verdict
        return {"task": self.task, "reward": self.reward, "reason": self.reason, "failed": self.failed,
                "setup_s": round(self.setup_s, 3), "services": self.services,
                "solution": {"reason": self.solution_reason, "exit_code": self.solution_exit,
                             "wall_s": round(self.solution_s, 3)},
                "verifier": {"reason": v.exec_reason, "exit_code": v.exit_code, "wall_s": round(v.wall_s, 3),
                             "rewards": dict(v.rewards), "output_tail": v.output[-1000:]}}


def check_needs(task: HarborTask, toolchain: Toolchain | None) -> list[str]:
    """The task's Debian packages and commands the toolchain does not offer, as phrases (empty:
    all met). Its Python packages are not among them: they come in layers (`packages`)."""
    n = task.needs
    if toolchain is None:
        wanted = [*n.python, *n.isolated, *n.apt, *n.commands]
        return [f"{w} (no toolchain: build it with scripts/setup.sh)" for w in dict.fromkeys(wanted)]
    return toolchain.missing(apt=n.apt_names, commands=n.commands)


def run_trial(sandbox: Sandbox, task: HarborTask, solution: Workspace | None = None, limits: Limits = Limits(),
              tag: ExecTag = ExecTag(), workspace: Workspace | None = None) -> Trial:
    """Set `task` up (unless `workspace` is its environment, built already), run `solution` (a
    folder with solve.sh; default: the task's oracle) as Harbor would, and verify. Raises
    Unrunnable when the folder cannot run."""
    own = solution is None
    solution = solution if solution is not None else task.solution
    if solution is None or solution.read("solve.sh") is None:
        raise Unrunnable(f"{task.path}: no solution/solve.sh to run")
    t0 = time.monotonic()
    built = workspace if workspace is not None else build(task, sandbox, limits, tag)
    t1 = time.monotonic()
    layer = packages.layers(task, sandbox.toolchain, sandbox).environment_name
    spec = task.session_spec(built, tag, limits, mounts=(read_only(SOLUTION, solution),), max_commands=1, layer=layer)
    with sandbox.open_session(spec) as session:
        r = session.run(("bash", f"{SOLUTION}/solve.sh"), time_limit_s=spec.wall_s,
                        memory_mb=min(task.config.memory_mb, limits.memory_mb))
        workspace = session.workspace
    if r.reason == ExecReason.SANDBOX_ERROR:
        verdict = Verdict(0.0, f"the sandbox failed running the solution: {r.error}", failed=True)
    elif own and r.lingering:
        run = services.run(sandbox, task, built, limits, tag)
        v = run.verdict
        return Trial(task.id, v.reward, f"{v.reason} (the solution's {r.lingering} processes served the tests)",
                     v.failed, run.solution_reason, run.solution_exit, t1 - t0, run.solution_s, v, services=True)
    else:
        verdict = verify(task, sandbox, workspace, tag, limits)
    return Trial(task.id, verdict.reward, verdict.reason, verdict.failed, r.reason.value, r.exit_code,
                 t1 - t0, r.wall_s, verdict)
