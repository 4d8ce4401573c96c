"""`tempering tasks run-folder`, `import` and `check-shipped`: Harbor task folders from the shell.

    tempering tasks run-folder PATH [--solution FILE] [--json] [--config FILE] [--set KEY=VALUE]...
    tempering tasks import DIR... [--oracle] [--noop] [--no-build] [--json] [--config FILE] [--set ...]
    tempering tasks check-shipped terminal [--sample N [--seed S] | --tasks NAME...] [--json]

run-folder sets a folder's environment up in a sandbox session, runs the solution script
(default solution/solve.sh; FILE is mounted alone as /solution/solve.sh) and verifies in a
fresh sandbox. It prints the result (`--json`: one JSON object with at least "reward" and
"reason") and exits 0 whenever verification completed, whatever the reward; 2, with a
one-line reason on stderr, for a folder it cannot run (malformed, unsupported, needs the
toolchain lacks, a RUN line that failed) or a sandbox that cannot start; 1 when the sandbox
failed during the trial. import checks every task folder under the DIRs (`importer.scan`) and
prints one line per folder, runnable or skipped with the reason (`--json`: one JSON object per
line), and a count on stderr; it exits 0 once the scan ran, 2 for bad arguments or no folders.
check-shipped runs a shipped task set's oracles (each must score 1) and a no-op (0) for each task, or a
sample of them; it exits 1 when any task does not. `add_parsers` puts them in `tempering tasks`'s
tree (`tempering.tasks_cli`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from tempering.config import ConfigError, load_config
from tempering.sandbox import toolchain as toolchains
from tempering.sandbox.factory import SandboxUnavailable, make_sandbox
from tempering.sandbox.workspace import Workspace
from tempering.tasks.harbor.build import SetupFailed
from tempering.tasks.harbor.folder import Unrunnable, load
from tempering.tasks.harbor.importer import scan
from tempering.tasks.harbor.trial import check_needs, run_trial

SHIPPED = ("terminal",)  # the shipped task sets `check-shipped` knows


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """Register run-folder, import and check-shipped on `tempering tasks`'s subparsers."""
    p = sub.add_parser("run-folder", help="set up a task folder, run its solution, verify; print the reward")
    p.add_argument("path")
    p.add_argument("--solution", metavar="FILE", help="a script to run instead of solution/solve.sh")
    _common(p)
    p.set_defaults(handler=run_folder)
    p = sub.add_parser("import", help="check every task folder under the given paths; list runnable and skipped")
    p.add_argument("dirs", nargs="+", metavar="DIR")
    p.add_argument("--oracle", action="store_true", help="run each oracle too (it must score 1)")
    p.add_argument("--noop", action="store_true", help="run a no-op too (it must score 0)")
    p.add_argument("--no-build", action="store_true", help="do not build environments (no sandbox)")
    _common(p)
    p.set_defaults(handler=import_folders)
    p = sub.add_parser("check-shipped", help="run every shipped task's oracle (reward 1) and a no-op (reward 0)")
    p.add_argument("set", choices=SHIPPED)
    p.add_argument("--sample", type=int, metavar="N", help="only N tasks, drawn with --seed (default: all)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tasks", nargs="+", metavar="NAME", help="only these tasks")
    _common(p)
    p.set_defaults(handler=check_shipped)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--config", metavar="FILE", help="a TOML config file (its [sandbox] section is used)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="override a config value, e.g. sandbox.toolchain=/opt/tc")


def _sandbox_config(args: argparse.Namespace):
    cfg = load_config(args.config, [f"--{o}" for o in args.overrides]).sandbox
    # One trial at a time: one warm sandbox of each kind is enough.
    return dataclasses.replace(cfg, workers=1)


def run_folder(args: argparse.Namespace, _rest: list[str] | None = None) -> int:
    try:
        cfg = _sandbox_config(args)
        task = load(args.path)
        solution = Workspace.from_files({"solve.sh": Path(args.solution).read_bytes()}) if args.solution else None
        tc = toolchains.locate(cfg.toolchain)
        missing = check_needs(task, tc)
        if missing:
            raise Unrunnable(f"{task.path}: needs what the toolchain lacks: {', '.join(missing)}")
        sandbox = make_sandbox(cfg)
    except (Unrunnable, ConfigError, SandboxUnavailable, toolchains.ToolchainError, OSError) as e:
        return _cannot(args, str(e).replace("\n", " "), 2)
    try:
        trial = run_trial(sandbox, task, solution)
    except SetupFailed as e:
        return _cannot(args, str(e), 1 if e.infrastructure else 2)
    except Unrunnable as e:
        return _cannot(args, str(e), 2)
    finally:
        sandbox.close()
    out = {"path": str(task.path), "status": "failed" if trial.failed else "verified", **trial.to_json()}
    if args.json:
        print(json.dumps(out))
    else:
        print(f"{task.id}: reward {trial.reward} ({trial.reason}); solution {trial.solution_reason} "
              f"in {trial.solution_s:.1f} s, tests {trial.verdict.exec_reason} in {trial.verdict.wall_s:.1f} s")
    if trial.failed:
        print(f"error: {trial.reason}", file=sys.stderr)
        return 1
    return 0


def _cannot(args: argparse.Namespace, reason: str, code: int) -> int:
    if args.json:
        print(json.dumps({"path": args.path, "status": "skipped" if code == 2 else "failed", "reward": None,
                          "reason": reason}))
    print(f"error: {reason}", file=sys.stderr)
    return code


def import_folders(args: argparse.Namespace, _rest: list[str] | None = None) -> int:
    try:
        cfg = _sandbox_config(args)
        tc = toolchains.locate(cfg.toolchain)
        sandbox = None if args.no_build else make_sandbox(cfg)
    except (ConfigError, SandboxUnavailable, toolchains.ToolchainError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    counts = {True: 0, False: 0}
    try:
        for result in scan(args.dirs, tc, sandbox, oracle=args.oracle, noop=args.noop):
            counts[result.runnable] += 1
            if args.json:
                print(json.dumps(result.to_json()), flush=True)
            else:
                status = "runnable" if result.runnable else "skipped "
                print(f"{status}  {result.path}  {result.reason}", flush=True)
    except ValueError as e:  # a DIR that does not exist
        print(f"error: {e}", file=sys.stderr)
        return 2
    finally:
        if sandbox is not None:
            sandbox.close()
    if not counts[True] + counts[False]:
        print(f"error: no task folders (instruction.md and tests/test.sh) under {' '.join(args.dirs)}", file=sys.stderr)
        return 2
    print(f"{counts[True]} runnable, {counts[False]} skipped", file=sys.stderr)
    return 0


def check_shipped(args: argparse.Namespace, _rest: list[str] | None = None) -> int:
    """Every chosen shipped task: its oracle must score 1, a no-op 0. Exits 0 when all do, 1
    when any does not (each listed with why), 2 for bad arguments or a sandbox that cannot start."""
    import random

    from tempering.tasks.terminal import catalog

    names = catalog.names()
    if args.tasks:
        unknown = sorted(set(args.tasks) - set(names))
        if unknown:
            print(f"error: no shipped task {unknown[0]!r} ({len(names)} tasks)", file=sys.stderr)
            return 2
        names = args.tasks
    elif args.sample is not None:
        names = sorted(random.Random(args.seed).sample(names, min(args.sample, len(names))))
    try:
        cfg = _sandbox_config(args)
        tc = toolchains.locate(cfg.toolchain)
        sandbox = make_sandbox(cfg)
    except (ConfigError, SandboxUnavailable, toolchains.ToolchainError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    bad = 0
    try:
        for name in names:
            (result,) = scan([catalog.folder(name)], tc, sandbox, oracle=True, noop=True)
            ok = result.runnable and result.oracle == 1.0 and result.noop == 0.0
            bad += not ok
            if args.json:
                print(json.dumps({"task": name, "ok": ok, **result.to_json()}), flush=True)
            else:
                print(f"{'ok  ' if ok else 'FAIL'}  {name}  oracle {result.oracle} noop {result.noop}"
                      f"{'' if ok else '  ' + result.reason}", flush=True)
    finally:
        sandbox.close()
    print(f"{len(names) - bad} of {len(names)} tasks: oracle 1, no-op 0", file=sys.stderr)
    return 1 if bad else 0
