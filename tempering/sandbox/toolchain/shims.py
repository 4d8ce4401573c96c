#!/usr/bin/python3 -IS
"""Offline stand-ins for the installers Harbor / Terminal-Bench test scripts call, run inside
the sandbox (standard library only). The toolchain's bin/ links apt-get, apt, pip, pip3, uv
and uvx here; the name it was called by picks the shim. They install nothing: what a script
asks for is either there already (the toolchain's manifest.json and the session's package
layer's, at /opt/layer, list the Python packages the sandbox's python3 sees, with versions,
which a pin must match; the toolchain's lists the Debian packages it offers), and the shim
succeeds, or it is not, and the shim fails the way the real tool would when offline, naming
what is missing. `uvx` and `uv run` drop their package options (-p, -w, --with, ...) once
those are present and run the command itself (pytest: the toolchain's). The host imports the
rules from here too (`satisfies`, `requirement_name`, `needless_apt`), so both sides judge a
need alike. Nothing here reaches the network.
"""

from __future__ import annotations

import json
import os
import re
import sys

ROOT = os.path.dirname(os.path.realpath(__file__))  # the toolchain folder: bin/ links up here
LAYER = "/opt/layer"  # request.LAYER_MOUNT: the session's package layer, when it has one
_REQUIREMENT = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*([^;#]*)(;.*)?")
_SPECIFIER = re.compile(r"\s*(===|==|!=|~=|>=|<=|>|<)\s*([^\s,]+)\s*")
_VERSION = re.compile(r"v?(?:\d+!)?(\d+(?:\.\d+)*)(?:[-_.]?(a|b|c|rc|alpha|beta|pre|preview)[-_.]?(\d*))?"
                      r"(?:[-_.]?(?:post|rev|r)[-_.]?(\d*)|-(\d+))?(?:[-_.]?dev[-_.]?(\d*))?(?:\+.*)?", re.I)
_PRE = {"a": 0, "alpha": 0, "b": 1, "beta": 1, "c": 2, "rc": 2, "pre": 2, "preview": 2}
# Debian packages a task may name without the sandbox offering them: headers, docs and debug
# symbols (only building needs them; wheels and the toolchain are built), editors, pagers,
# terminal recorders and multiplexers (for a person at a terminal), and downloaders, the uv
# installer's and Python's own (the sandbox has no network; its python3 and pip are ours).
_NEEDLESS_SUFFIXES = ("-dev", "-doc", "-dbg", "-dbgsym")
_NEEDLESS = {"nano", "vim", "vim-tiny", "vim-nox", "neovim", "emacs", "emacs-nox", "less", "most", "tmux", "screen",
             "asciinema", "ca-certificates", "gnupg", "software-properties-common", "apt-utils", "apt-transport-https",
             "pkg-config", "pkgconf", "python3", "python3-pip", "python3-venv", "python-is-python3", "man-db"}
# Options of pip install / uvx / uv that take a value (the value is skipped with them).
PIP_VALUED = {"-i", "--index-url", "--extra-index-url", "-c", "--constraint", "-f", "--find-links",
              "--target", "-t", "--prefix", "--root", "--python-version", "--platform", "--cache-dir",
              "--trusted-host", "--progress-bar", "--python", "--implementation", "--abi", "--src", "--log",
              "--upgrade-strategy", "--root-user-action", "--report", "--global-option", "--config-settings",
              "-C", "--index-strategy", "--resolution", "--prerelease", "--exclude-newer", "--python-platform",
              "--keyring-provider", "--link-mode", "--reinstall-package", "--upgrade-package", "--refresh-package",
              "--overrides", "--build-constraint", "--extra", "--group", "--config-file"}
UV_VALUED = {"-p", "--python", "--from", "--index-url", "--extra-index-url", "--index", "--default-index",
             "--cache-dir", "--directory", "--project", "--python-preference", "--color", "--index-strategy",
             "--resolution", "--prerelease", "--exclude-newer", "--python-platform", "--keyring-provider",
             "--link-mode", "--reinstall-package", "--upgrade-package", "--refresh-package", "--config-file",
             "--constraint", "-c", "--overrides", "--build-constraint", "--env-file", "--extra", "--group",
             "--only-group", "--no-group", "--package", "--find-links", "-f", "--config-setting", "-C"}


def normalize(name: str) -> str:
    """A package name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def manifest() -> dict:
    with open(os.path.join(ROOT, "manifest.json")) as f:
        return json.load(f)


def python_packages() -> dict[str, str]:
    """What the sandbox's python3 sees, normalised name -> version: the layer's first."""
    found = {}
    for path in (os.path.join(ROOT, "manifest.json"), os.path.join(LAYER, "manifest.json")):
        try:
            with open(path) as f:
                found.update({normalize(k): v for k, v in json.load(f)["python_packages"].items()})
        except OSError:
            continue  # no layer in this session
    return found


def requirement_name(spec: str) -> str | None:
    """The package a requirement names ("numpy>=1.2" -> "numpy"); None for a path or URL."""
    spec = spec.strip()
    if spec.startswith((".", "/", "-", "~")) or "://" in spec or spec.endswith((".whl", ".tar.gz", ".zip")):
        return None
    m = _REQUIREMENT.fullmatch(spec)
    return m.group(1) if m else None


def satisfies(spec: str, version: str | None) -> bool:
    """Whether an installed `version` (None: not installed) meets requirement `spec`'s version
    specifiers (==, !=, <, <=, >, >=, ~=, ===, and == X.*). A version it cannot read meets
    only a requirement without specifiers."""
    m = _REQUIREMENT.fullmatch(spec.strip())
    if version is None or m is None:
        return False
    for clause in filter(str.strip, m.group(3).split(",")):
        c = _SPECIFIER.fullmatch(clause)
        if c is None or not _meets(version, c.group(1), c.group(2)):
            return False
    return True


def _meets(version: str, op: str, wanted: str) -> bool:
    if op == "===":
        return version == wanted
    if wanted.endswith(".*") and op in ("==", "!="):
        prefix = _release(wanted[:-2])
        have = version_key(version)
        return have is not None and prefix is not None and (have[0][:len(prefix)] == prefix) == (op == "==")
    have, want = version_key(version), version_key(wanted)
    if have is None or want is None:
        return False
    if op == "~=":
        release = _release(wanted)
        stem = release[:-1] if release and len(release) > 1 else release
        return have >= want and have[0][:len(stem)] == stem
    return {"==": have == want, "!=": have != want, ">=": have >= want, "<=": have <= want, ">": have > want,
            "<": have < want}[op]


def _release(text: str) -> tuple[int, ...] | None:
    m = _VERSION.fullmatch(text.strip())
    return tuple(int(p) for p in m.group(1).split(".")) if m else None


def version_key(text: str) -> tuple | None:
    """A PEP 440 version as a sortable key: release (zero-padded), pre, post, dev."""
    m = _VERSION.fullmatch(text.strip())
    if m is None:
        return None
    release = tuple(int(p) for p in m.group(1).split("."))
    release += (0,) * (8 - len(release))
    pre = (0, _PRE[m.group(2).lower()], int(m.group(3) or 0)) if m.group(2) else (1, 0, 0)
    post = int(m.group(4) or m.group(5) or 0) if m.group(4) is not None or m.group(5) is not None else -1
    dev = (0, int(m.group(6) or 0)) if m.group(6) is not None else (1, 0)
    if m.group(6) is not None and not m.group(2) and post < 0:
        pre = (-1, 0, 0)  # 1.0.dev1 comes before 1.0a1
    return release, pre, post, dev


def missing_python(specs: list[str]) -> list[str]:
    present = python_packages()
    out = []
    for spec in specs:
        name = requirement_name(spec)
        if name is None:
            out.append(f"{spec} (a local path or URL: nothing is built or fetched offline)")
        elif not satisfies(spec, present.get(normalize(name))):
            here = present.get(normalize(name))
            out.append(f"{spec} ({here} is installed)" if here else spec)
    return out


def needless_apt(name: str) -> bool:
    """A Debian package a task may ask for that the sandbox need not offer (see _NEEDLESS)."""
    return name.endswith(_NEEDLESS_SUFFIXES) or name in _NEEDLESS


def pip(args: list[str]) -> int:
    if not args or args[0] in ("-V", "--version"):
        print("pip 0.0 (tempering offline toolchain)")
        return 0
    if args[0] in ("list", "freeze"):
        for name, version in sorted(python_packages().items()):
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
        elif arg in PIP_VALUED and rest:
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
    offered = set(manifest()["apt_packages"])
    wanted = [w.split("=")[0].split(":")[0] for w in words[1:]]
    lacking = [w for w in wanted if w not in offered and not needless_apt(w)]
    if lacking:
        print(f"E: Unable to locate package {lacking[0]} (offline toolchain: not among the Debian packages it "
              f"offers: {' '.join(lacking)})", file=sys.stderr)
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
        elif name in UV_VALUED and not eq and rest:
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
