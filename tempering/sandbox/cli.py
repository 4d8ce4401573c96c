"""`tempering sandbox run`: run one command in the sandbox and print its ExecResult as JSON.

    tempering sandbox run [--time-limit S] [--memory-mb N] [--pids N] [--workdir DIR]
                          [--env K=V]... [--collect NAME]... [--config FILE]
                          [--set section.key=value]... -- CMD ARGS...

DIR's regular files (symlinks and special files are skipped) are copied into the workspace.
The result is one JSON object on stdout; collected files are base64 in "files". The exit
status is 0 when the sandbox ran the command (whatever the command's own exit code), 1 on a
sandbox_error and 2 when the sandbox cannot start or the arguments are wrong. `add_parser`
registers the subcommand on the main CLI; `main` runs it standalone
(python -m tempering.sandbox.cli sandbox run -- CMD).
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import json
import os
import stat
import sys
from pathlib import Path

from tempering.config import ConfigError, load_config
from tempering.records import ExecReason, ExecResult
from tempering.sandbox.factory import SandboxUnavailable, make_sandbox
from tempering.sandbox.request import ExecRequest


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register `sandbox run` on the main CLI's subparsers; the handler is `args.handler`."""
    sandbox = subparsers.add_parser("sandbox", help="run commands in the sandbox")
    actions = sandbox.add_subparsers(dest="sandbox_action", required=True)
    run = actions.add_parser("run", help="run one command in the sandbox and print the result as JSON")
    run.add_argument("--time-limit", type=float, metavar="S", help="wall-clock limit (sandbox.time_limit_s)")
    run.add_argument("--memory-mb", type=int, metavar="N", help="memory limit (sandbox.memory_mb)")
    run.add_argument("--pids", type=int, metavar="N", help="process limit (sandbox.pids)")
    run.add_argument("--workdir", metavar="DIR", help="copy DIR's files into the workspace")
    run.add_argument("--env", action="append", default=[], metavar="K=V", help="set an environment variable")
    run.add_argument("--collect", action="append", default=[], metavar="NAME",
                     help="read this workspace file back after the run")
    run.add_argument("--config", dest="sandbox_config", metavar="FILE", help="a TOML config file")
    run.add_argument("--set", dest="sandbox_overrides", action="append", default=[],
                     metavar="SECTION.KEY=VALUE", help="override a config value, e.g. sandbox.cpus=2")
    run.add_argument("sandbox_argv", nargs=argparse.REMAINDER, metavar="-- CMD ARGS",
                     help="the command to run")
    run.set_defaults(handler=run_command)


def run_command(args: argparse.Namespace, _unparsed: list[str] | None = None) -> int:
    command = list(args.sandbox_argv)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        print("tempering sandbox run: give the command after --", file=sys.stderr)
        return 2
    try:
        cfg = load_config(args.sandbox_config, [f"--{o}" for o in args.sandbox_overrides]).sandbox
        request = _request(args, command, cfg)
    except (ConfigError, ValueError, OSError) as e:
        print(f"tempering sandbox run: {e}", file=sys.stderr)
        return 2
    try:
        # One command: a warm pool would only add start-up work.
        sandbox = make_sandbox(dataclasses.replace(cfg, warm_pool=False, workers=1))
    except SandboxUnavailable as e:
        print(f"tempering sandbox run: {e}", file=sys.stderr)
        return 2
    try:
        result = sandbox.run(request)
    finally:
        sandbox.close()
    print(json.dumps(result_to_json(result)))
    return 1 if result.reason == ExecReason.SANDBOX_ERROR else 0


def _request(args: argparse.Namespace, command: list[str], cfg) -> ExecRequest:
    env = {}
    for item in args.env:
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--env {item!r}: expected K=V")
        env[key] = value
    # A flag not given (None) is the config's value; resolved here, as the sandbox would, so a
    # workdir too large for the memory limit is refused with the other input errors.
    return ExecRequest(
        command=tuple(command), files=read_workdir(args.workdir, cfg.disk_mb << 20) if args.workdir else {}, env=env,
        time_limit_s=args.time_limit, memory_mb=args.memory_mb, pids=args.pids,
        collect=tuple(args.collect)).resolved(cfg)


def read_workdir(directory: str, limit_bytes: int) -> dict[str, bytes]:
    """The regular files under `directory` by relative name; symlinks are never followed. More
    than `limit_bytes` (the workspace's size, sandbox.disk_mb) is refused."""
    root = Path(directory)
    if not root.is_dir():
        raise ValueError(f"--workdir {directory!r} is not a directory")
    files, total = {}, 0
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in filenames:
            path = Path(dirpath) / name
            st = path.lstat()
            if not stat.S_ISREG(st.st_mode):
                continue
            total += st.st_size
            if total > limit_bytes:
                raise ValueError(f"--workdir {directory!r} holds more than the workspace's {limit_bytes} bytes "
                                 f"(sandbox.disk_mb)")
            files[path.relative_to(root).as_posix()] = path.read_bytes()
    return files


def result_to_json(result: ExecResult) -> dict:
    out = dataclasses.asdict(result)
    out["reason"] = result.reason.value
    out["files"] = {name: base64.b64encode(data).decode() for name, data in result.files.items()}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tempering")
    add_parser(parser.add_subparsers(dest="command_name", required=True))
    args = parser.parse_args(argv)
    return args.handler(args)


if __name__ == "__main__":
    raise SystemExit(main())
