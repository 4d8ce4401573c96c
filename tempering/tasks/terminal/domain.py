"""The `terminal` domain: the shipped terminal coding tasks as RL tasks.

An episode is an agent in a sandbox session at the task's WORKDIR (/app) with the `run`, `read`,
`write`, `edit` and `submit` tools; the instruction is its prompt (a user message for chat
models); the task's hidden tests, run on the final workspace in a fresh sandbox, give the
reward (`harbor_tests`). Tasks are drawn at random (with replacement) from those the sandbox's
toolchain can run; the others are skipped, and the reasons printed once per process. A task's
folder is where it lives (`catalog.folder`: the data folder, or the cache for a generated one),
so every process sees the same path (task identity includes the folder). The
toolchain is looked up as `sandbox.toolchain = "auto"` finds it (a domain is not handed the
sandbox section); a run whose `sandbox.toolchain` names another folder uses that one for the
episodes themselves.
"""

from __future__ import annotations

import functools
import random
import sys
from pathlib import Path

from tempering.records import Budget, Environment, Message, Task, Trajectory
from tempering.verdict import InfrastructureError, Verdict, VerifierContext
from tempering.tasks.domain import Domain
from tempering.tasks.terminal import catalog

TOOLS = ("run", "read", "write", "edit", "submit")
SYSTEM = ("You are working in a Linux terminal. Use the tools to inspect and change files and run "
          "commands in the workspace; call submit when the task is done.")


@functools.cache
def runnable() -> tuple[str, ...]:
    """The shipped tasks whose needs the toolchain meets; the others are reported once."""
    from tempering.sandbox.toolchain import locate

    toolchain = locate("auto")
    ok, skipped = [], []
    for info in catalog.tasks():
        missing = (toolchain.missing(info.python_packages, (), info.commands) if toolchain is not None
                   else ["the sandbox toolchain (build it with scripts/setup.sh)"])
        (skipped if missing else ok).append((info.name, missing))
    if skipped:
        print(f"[tempering] terminal: {len(skipped)} of {len(ok) + len(skipped)} tasks skipped, e.g. "
              f"{skipped[0][0]}: needs {', '.join(skipped[0][1])}", file=sys.stderr, flush=True)
    return tuple(name for name, _ in ok)


def _make(rng: random.Random) -> Task:
    names = runnable()
    if not names:
        raise RuntimeError("terminal: no shipped task can run here (see the skip reasons above)")
    name = rng.choice(names)
    return folder_task(catalog.folder(name), catalog.get(name).agent_timeout_sec)


def folder_task(path: Path, agent_timeout_s: float) -> Task:
    """An episode of the Harbor task folder at `path` (a shipped task's or any other), as this
    domain plays and verifies it: its instruction as the prompt, the terminal tools."""
    instruction = (path / "instruction.md").read_text(encoding="utf-8")
    return Task(id="", domain="terminal", prompt=instruction, answer="",
                messages=(Message("system", SYSTEM), Message("user", instruction)), tools=TOOLS,
                environment=Environment(workdir="/app", folder=str(path)),
                budget=Budget(max_turns=24, max_tokens=8192, wall_s=agent_timeout_s, cpu_s=300.0))


def harbor_tests(task: Task, sample: Trajectory, ctx: VerifierContext) -> Verdict:
    """A Harbor-format task: its hidden tests run on the episode's final workspace in a fresh
    sandbox (`tasks.harbor.verify`); the reward is what they write. `outcome` is that reward."""
    from tempering.tasks.harbor import verify_folder  # the Harbor package loads only for its tasks

    if ctx.sandbox is None or ctx.workspace is None or task.environment is None:
        raise InfrastructureError("harbor_tests needs the sandbox and the episode's final workspace")
    verdict = verify_folder(task.environment.folder, ctx.sandbox, ctx.workspace, ctx.tag)
    if verdict.failed:
        raise InfrastructureError(f"verification failed: {verdict.reason}")
    return Verdict({"outcome": verdict.reward}, verdict.reason)


def check(task: Task, sandbox) -> tuple[float, float]:
    """The task folder's oracle (solution/solve.sh) and a no-op, run as Harbor runs them. -> their
    rewards (a trial the sandbox failed is reported as an infrastructure failure)."""
    from tempering.tasks.harbor import NOOP, load_cached, run_trial

    folder = load_cached(task.environment.folder)
    oracle, noop = run_trial(sandbox, folder), run_trial(sandbox, folder, NOOP)
    for trial in (oracle, noop):
        if trial.failed:
            raise InfrastructureError(f"{task.environment.folder}: {trial.reason}")
    return oracle.reward, noop.reward


DOMAIN = Domain("terminal", "coding in a terminal against hidden tests (Harbor-format task folders)", harbor_tests,
                make=_make, sandbox=True, check=check)
