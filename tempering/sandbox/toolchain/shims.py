#!/usr/bin/python3 -IS
"""Offline stand-ins for the installers Harbor / Terminal-Bench test scripts call, run inside
the sandbox (standard library only). The toolchain's bin/ links apt-get, apt, pip, pip3, uv
and uvx here; the name it was called by picks the shim. They install nothing: what a script
asks for is either in the toolchain already (its manifest.json lists the Python packages the
sandbox's python3 sees and the Debian packages of the machine), and the shim succeeds, or it
is not, and the shim fails the way the real tool would when offline, naming what is missing.
`uvx` and `uv run` drop their package options (-p, -w, --with, ...) once those are present
and run the command itself (pytest: the toolchain's). Nothing here reaches the network.
"""

from __future__ import annotations

import json
import os
import re
import sys

ROOT = os.path.dirname(os.path.realpath(__file__))  # the toolchain folder: bin/ links up here
_REQUIREMENT = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*([^;#]*)")
# Options of pip install / uvx / uv that take a value (the value is skipped with them).
_PIP_VALUED = {"-i", "--index-url", "--extra-index-url", "-c", "--constraint", "-f", "--find-links",
               "--target", "-t", "--prefix", "--root", "--python-version", "--platform", "--cache-dir",
               "--trusted-host", "--progress-bar", "--python", "--implementation", "--abi"}
_UV_VALUED = {"-p", "--python", "--from", "--index-url", "--extra-index-url", "--index", "--default-index",
              "--cache-dir", "--directory", "--project", "--python-preference", "--color"}


def normalize(name: str) -> str:
    """A package name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def manifest() -> dict:
    with open(os.path.join(ROOT, "manifest.json")) as f:
        return json.load(f)


def requirement_name(spec: str) -> str | None:
    """The package a requirement names ("numpy>=1.2" -> "numpy"); None for a path or URL."""
    if spec.startswith((".", "/", "-")) or "://" in spec or spec.endswith((".whl", ".tar.gz", ".zip")):
        return None
    m = _REQUIREMENT.fullmatch(spec.strip())
    return m.group(1) if m else None


def missing_python(specs: list[str]) -> list[str]:
    present = {normalize(n) for n in manifest()["python_packages"]}
    out = []
    for spec in specs:
        name = requirement_name(spec)
        if name is None:
            out.append(f"{spec} (a local path or URL: nothing is built or fetched offline)")
        elif normalize(name) not in present:
            out.append(spec)
    return out


def pip(args: list[str]) -> int:
    if not args or args[0] in ("-V", "--version"):
        print("pip 0.0 (tempering offline toolchain)")
        return 0
    if args[0] in ("list", "freeze"):
        for name, version in sorted(manifest()["python_packages"].items()):
            print(f"{name}=={version}" if args[0] == "freeze" else f"{name} {version}")
        return 0
    if args[0] != "install":
        print(f"pip (offline toolchain): 'pip {args[0]}' is not available", file=sys.stderr)
        return 1
    specs, rest = [], args[1:]
    while rest:
        arg = rest.pop(0)
        if arg in ("-r", "--requirement") and rest:
            specs += _read_requirements(rest.pop(0))
        elif arg in ("-e", "--editable"):
            specs.append(rest.pop(0) if rest else ".")
        elif arg in _PIP_VALUED and rest:
            rest.pop(0)
        elif not arg.startswith("-"):
            specs.append(arg)
    return _present(specs, "pip")


def _read_requirements(path: str) -> list[str]:
    try:
        with open(path) as f:
            return [line.split("#")[0].strip() for line in f if line.split("#")[0].strip()
                    and not line.strip().startswith("-")]
    except OSError as e:
        print(f"pip (offline toolchain): cannot read {path}: {e.strerror}", file=sys.stderr)
        return [path]


def _present(specs: list[str], tool: str, quiet: bool = False) -> int:
    lacking = missing_python(specs)
    if lacking:
        print(f"ERROR: {tool} (offline toolchain): not available without the network: {', '.join(lacking)}",
              file=sys.stderr)
        return 1
    for spec in specs if not quiet else ():
        print(f"Requirement already satisfied: {spec}")
    return 0


def apt_get(args: list[str]) -> int:
    words = [a for a in args if not a.startswith("-")]
    if not words:
        print("apt-get (offline toolchain): no command given", file=sys.stderr)
        return 100
    if words[0] in ("update", "upgrade", "dist-upgrade", "clean", "autoclean", "autoremove"):
        return 0
    if words[0] != "install":
        print(f"E: apt-get (offline toolchain): '{words[0]}' is not available", file=sys.stderr)
        return 100
    installed = set(manifest()["apt_packages"])
    wanted = [w.split("=")[0].split(":")[0] for w in words[1:]]
    lacking = [w for w in wanted if w not in installed]
    if lacking:
        print(f"E: Unable to locate package {lacking[0]} (offline toolchain: not installed on this "
              f"machine: {' '.join(lacking)})", file=sys.stderr)
        return 100
    for w in wanted:
        print(f"{w} is already the newest version.")
    return 0


def uvx(args: list[str]) -> int:
    """uvx [options] COMMAND [ARGS]: the packages asked for must be present; then run COMMAND."""
    withs, rest = [], list(args)
    while rest and rest[0].startswith("-"):
        opt = rest.pop(0)
        name, eq, value = opt.partition("=")
        if name in ("-w", "--with", "--with-requirements", "--with-editable"):
            withs.append(value if eq else (rest.pop(0) if rest else ""))
        elif name in _UV_VALUED and not eq and rest:
            rest.pop(0)
    if not rest:
        print("uvx (offline toolchain): no command given", file=sys.stderr)
        return 2
    if _present([w for w in withs if w], "uvx", quiet=True) != 0:  # the command's output is what counts
        return 1
    return _exec(rest)


def uv(args: list[str]) -> int:
    if not args or args[0] in ("-V", "--version", "version"):
        print("uv 0.0.0 (tempering offline toolchain)")
        return 0
    if args[0] == "pip":
        return pip(args[1:])
    if args[0] in ("run", "tool"):
        return uvx(args[2:] if args[0] == "tool" and args[1:2] == ["run"] else args[1:])
    print(f"uv (offline toolchain): 'uv {args[0]}' is not available", file=sys.stderr)
    return 2


def _exec(argv: list[str]) -> int:
    program = os.path.join(ROOT, "bin", argv[0]) if argv[0] in ("pytest", "python", "python3") else argv[0]
    try:
        os.execvp(program, [argv[0], *argv[1:]])
    except OSError as e:
        print(f"uvx (offline toolchain): cannot run {argv[0]}: {e.strerror}", file=sys.stderr)
        return 127


SHIMS = {"pip": pip, "pip3": pip, "apt-get": apt_get, "apt": apt_get, "uvx": uvx, "uv": uv}


def main(argv: list[str]) -> int:
    name = os.path.basename(argv[0])
    shim = SHIMS.get(name)
    if shim is None:
        print(f"tempering toolchain: no shim named {name!r}", file=sys.stderr)
        return 127
    for stream in (sys.stdout, sys.stderr):
        stream.reconfigure(line_buffering=True)
    return shim(argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
