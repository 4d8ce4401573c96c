"""A task's Dockerfile, interpreted instead of built: what the starting workspace holds and
which commands prepare it.

No Docker and no base image: the sandbox's own system stands in for FROM, and the final
WORKDIR becomes the session's workspace. `interpret` reads the instructions in order: COPY
and ADD of local files (from the build context, `environment/`) into that WORKDIR become
`Copy` steps; into a folder of their own elsewhere (/data, /opt/x: one the sandbox's system
does not have) they fill `Environment.outside`, mounted writable in every session (what RUN
lines change there is not kept); WORKDIR lines below the final one become directories, RUN
becomes a `Run` step (run offline in the sandbox at set-up, `build`), ENV and ARG set the
environment (ARG for RUN only, ENV for everything after), SHELL sets RUN's shell. CMD,
ENTRYPOINT, EXPOSE, LABEL, USER, VOLUME, HEALTHCHECK, STOPSIGNAL and ONBUILD change nothing
here and are noted, and so is COPY --from of uv's image (the toolchain's uv and uvx stand in).
What cannot be honoured raises `Unsupported` naming the line: multi-stage builds (a second
FROM, COPY --from another stage or image), ADD of a URL or an archive, heredocs, COPY into the
sandbox's own system folders (/usr, /etc, ...) or from outside the build context, another
escape character. Reading the text into instructions and their words (continuations, JSON
form, variables, quoting) is `dockerfile_syntax`'s.
"""

from __future__ import annotations

import glob
import io
import json
import posixpath
import re
import shlex
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from tempering.sandbox.workspace import Workspace
from tempering.tasks.harbor.dockerfile_syntax import (Unsupported, env_pairs, instructions, json_form, substitute,
                                                      unquote)

_IGNORED = ("CMD", "ENTRYPOINT", "EXPOSE", "LABEL", "MAINTAINER", "USER", "VOLUME", "HEALTHCHECK", "STOPSIGNAL",
            "ONBUILD")
# Top-level folders of the sandbox's own system, and of /opt: a COPY cannot add a folder there.
_SYSTEM = {"", "bin", "boot", "dev", "etc", "lib", "lib32", "lib64", "libx32", "proc", "root", "run", "sbin", "sys",
           "tmp", "usr", "workspace", ".newroot", ".layers", "tests", "solution", "logs"}
_SYSTEM_OPT = {"tempering", "toolchain", "layer"}
_UV_IMAGE = re.compile(r"(ghcr\.io/)?astral-sh/uv(:[\w.-]+)?(@\S+)?")


@dataclass(frozen=True)
class Copy:
    """Files into the workspace: `content` placed inside `dest` (workdir-relative, "" for the
    workdir itself) when that is a directory: always when `into_dir` (a trailing slash,
    several sources, a directory source), else when the workspace has a directory there
    already. Otherwise `content` is one file, and `dest` its new name."""

    dest: str
    content: Workspace
    into_dir: bool
    line: int

    def apply(self, ws: Workspace) -> Workspace:
        if self.into_dir or self.dest == "" or ws.kind(self.dest) == "dir":
            return ws.merge(self.dest, self.content)
        (name, data), = self.content.files().items()
        return ws.write(self.dest, data, self.content.mode(name))


@dataclass(frozen=True)
class Run:
    argv: tuple[str, ...]
    env: Mapping[str, str]  # ENV and ARG values at that line
    line: int
    text: str  # the instruction as written, for messages
    cwd: str = ""  # its WORKDIR, when below the final one ("" for the final one itself)

    @property
    def command(self) -> tuple[str, ...]:
        """`argv`, run in `cwd`."""
        return ("/bin/sh", "-c", 'cd "$0" && exec "$@"', self.cwd, *self.argv) if self.cwd else self.argv


@dataclass(frozen=True)
class Environment:
    base_image: str
    workdir: str
    env: Mapping[str, str]  # the final ENV: what the agent's commands and the tests get
    steps: tuple[Copy | Run, ...]
    notes: tuple[str, ...] = ()  # instructions that changed nothing here, and why
    outside: Mapping[str, Workspace] = field(default_factory=dict)  # folder outside WORKDIR -> what COPY put there


@dataclass
class _State:
    context: Path
    workdir: str = "/"
    env: dict = field(default_factory=dict)
    args: dict = field(default_factory=dict)
    shell: tuple[str, ...] = ("/bin/sh", "-c")
    base: str = ""
    steps: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    outside: dict = field(default_factory=dict)


def interpret(text: str, context: Path) -> Environment:
    """The environment a Dockerfile describes, its COPY sources read from `context`."""
    todo = instructions(text)
    final = _final_workdir(todo)
    state = _State(context=context.resolve())
    for number, keyword, args in todo:
        where = f"Dockerfile line {number} ({keyword})"
        if "<<" in args and keyword in ("RUN", "COPY", "ADD"):
            raise Unsupported(f"{where}: heredocs are not supported")
        handler = _HANDLERS.get(keyword)
        if handler is not None:
            handler(state, number, args, final, where)
        elif keyword in _IGNORED:
            state.notes.append(f"{where}: ignored (no effect without an image)")
        else:
            raise Unsupported(f"{where}: unknown or unsupported instruction")
    if not state.base:
        raise Unsupported("Dockerfile: no FROM line")
    return Environment(state.base, final, dict(state.env), tuple(state.steps), tuple(state.notes),
                       dict(state.outside))


def _final_workdir(todo: list[tuple[int, str, str]]) -> str:
    workdir, env = "/", {}
    for number, keyword, args in todo:
        if keyword == "WORKDIR":
            workdir = posixpath.normpath(posixpath.join(workdir, substitute(args, env)))
        elif keyword == "ENV":
            env.update(env_pairs(args, env, number))
        elif keyword == "ARG":
            name, eq, value = args.partition("=")
            env.setdefault(name.strip(), unquote(value) if eq else "")
    if workdir == "/":
        raise Unsupported("Dockerfile: the final WORKDIR is / (the workspace must be a directory of its own)")
    return workdir


def _from(state: _State, number: int, args: str, final: str, where: str) -> None:
    if state.base:
        raise Unsupported(f"{where}: multi-stage builds (a second FROM) are not supported")
    state.base = substitute(args.split()[0] if args else "", state.args) or "?"


def _arg(state: _State, number: int, args: str, final: str, where: str) -> None:
    name, eq, value = args.partition("=")
    value = unquote(substitute(value, {**state.args, **state.env})) if eq else ""
    state.args.setdefault(name.strip(), value)  # a build-arg's default; no --build-arg here


def _env(state: _State, number: int, args: str, final: str, where: str) -> None:
    state.env.update(env_pairs(args, {**state.args, **state.env}, number))


def _workdir(state: _State, number: int, args: str, final: str, where: str) -> None:
    state.workdir = posixpath.normpath(posixpath.join(state.workdir, substitute(args, {**state.args, **state.env})))
    rel = _inside(state.workdir, final)
    if rel:  # WORKDIR creates the directory
        state.steps.append(Copy("", Workspace().mkdir(rel), into_dir=True, line=number))


def _shell(state: _State, number: int, args: str, final: str, where: str) -> None:
    try:
        argv = json.loads(args)
    except ValueError:
        argv = None
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
        raise Unsupported(f"{where}: SHELL takes a JSON array of strings")
    state.shell = tuple(argv)


def _run(state: _State, number: int, args: str, final: str, where: str) -> None:
    flags = re.match(r"((?:--\S+\s+)*)(.*)", args, re.S)
    if flags.group(1).strip():
        raise Unsupported(f"{where}: RUN options ({flags.group(1).strip()}) are not supported")
    argv = json_form(args)
    if argv is None:
        argv = [*state.shell, args]
    below = _inside(state.workdir, final)
    if below is None:
        state.notes.append(f"{where}: runs in {final}, not in {state.workdir} (only the final WORKDIR exists)")
    cwd = state.workdir if below else ""
    state.steps.append(Run(tuple(argv), {**state.args, **state.env}, number, args, cwd))


def _copy(state: _State, number: int, args: str, final: str, where: str, add: bool = False) -> None:
    words = json_form(args) or shlex.split(substitute(args, {**state.args, **state.env}))
    options = {}
    while words and words[0].startswith("--"):
        name, _, value = words.pop(0)[2:].partition("=")
        options[name] = value
    unknown = set(options) - {"chown", "chmod", "link", "from"}
    if unknown:
        raise Unsupported(f"{where}: options {sorted(unknown)} are not supported")
    if len(words) < 2:
        raise Unsupported(f"{where}: needs a source and a destination")
    *sources, dest = words
    if "from" in options:
        _copy_from(state, options["from"], sources, where)
        return
    target = posixpath.normpath(posixpath.join(state.workdir, dest))
    rel, root = _inside(target, final), ""
    if rel is None:
        root = _outside_root(target, final, where)
        rel = _inside(target, root)
    mode = int(options["chmod"], 8) if options.get("chmod") else None
    content, multiple = Workspace(), len(sources) > 1
    for source in sources:
        if add and (re.match(r"\w+://", source) or re.search(r"\.(tar|tgz|gz|bz2|xz|zip)$", source)):
            raise Unsupported(f"{where}: ADD of a URL or an archive is not supported")
        matches = _sources(state.context, source, where)
        multiple = multiple or len(matches) > 1 or matches[0].is_dir()
        for path in matches:
            part = Workspace.from_dir(path) if path.is_dir() else Workspace.from_files(
                {path.name: path.read_bytes()}, path.stat().st_mode & 0o777)
            content = content.merge("", _chmod(part, mode) if mode is not None else part)
    step = Copy(rel, content, into_dir=multiple or dest.endswith("/"), line=number)
    if root and rel == "" and not step.into_dir:
        raise Unsupported(f"{where}: {target} is a file outside the final WORKDIR {final} (only folders of files "
                          "can be added there)")
    if root:
        state.outside[root] = step.apply(state.outside.get(root, Workspace()))
    else:
        state.steps.append(step)


def _copy_from(state: _State, source: str, paths: list[str], where: str) -> None:
    """COPY --from: only uv's own image, whose uv and uvx the toolchain's shims stand in for."""
    if _UV_IMAGE.fullmatch(source) and {posixpath.basename(p) for p in paths} <= {"uv", "uvx"}:
        state.notes.append(f"{where}: uv's binaries from {source}: the toolchain's uv and uvx stand in")
        return
    raise Unsupported(f"{where}: COPY --from={source} (files from another build stage or image: multi-stage "
                      "builds) is not supported")


def _outside_root(target: str, workdir: str, where: str) -> str:
    """The folder of its own, outside `workdir`, that COPY's `target` lies in: the first folder
    below what target and workdir share (/data for /data/x, /srv/in for /srv/in/a.csv with a
    WORKDIR of /srv/app), or below /opt (/opt/tool for /opt/tool/bin). Unsupported when that is
    a folder of the sandbox's system (/usr, /etc, ...) or of Harbor's (/tests, /logs)."""
    parts, shared = target.strip("/").split("/"), workdir.strip("/").split("/")
    depth = next((i for i, (a, b) in enumerate(zip(parts, shared)) if a != b), len(shared))
    if parts[0] == "opt":
        depth = max(depth, 1)  # /opt holds the sandbox's own folders: a task's gets one below it
    root = "/" + "/".join(parts[:depth + 1])
    if parts[0] in _SYSTEM or (parts[0] == "opt" and parts[1:2] and parts[1] in _SYSTEM_OPT):
        raise Unsupported(f"{where}: {target} is outside the final WORKDIR {workdir}, in a folder of the sandbox's "
                          f"own system (only new folders, such as /data, can be added)")
    if workdir.startswith(root + "/"):
        raise Unsupported(f"{where}: {target} holds the final WORKDIR {workdir} (only it, or folders beside it, "
                          "can be filled)")
    return root


def _sources(context: Path, source: str, where: str) -> list[Path]:
    pattern = str(context / source.lstrip("/"))
    matches = [Path(p) for p in sorted(glob.glob(pattern))] if glob.has_magic(source) else [Path(pattern)]
    matches = [p for p in matches if p.exists() or p.is_symlink()]
    if not matches:
        raise Unsupported(f"{where}: {source} does not exist in the build context (environment/)")
    for path in matches:
        resolved = path.resolve()
        if resolved != context and context not in resolved.parents:
            raise Unsupported(f"{where}: {source} lies outside the build context")
    return matches


def _chmod(ws: Workspace, mode: int) -> Workspace:
    """COPY --chmod: every file and directory gets `mode`."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=io.BytesIO(ws.archive or bytes(1024)), mode="r:") as src, \
            tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as out:
        for m in src.getmembers():
            if not m.issym():
                m.mode = mode
            out.addfile(m, src.extractfile(m) if m.isreg() else None)
    return Workspace(buf.getvalue())


def _inside(path: str, workdir: str) -> str | None:
    """`path` relative to `workdir` ("" for itself), or None when outside it."""
    if path == workdir:
        return ""
    return path[len(workdir) + 1:] if path.startswith(workdir + "/") else None


_HANDLERS = {"FROM": _from, "ARG": _arg, "ENV": _env, "WORKDIR": _workdir, "SHELL": _shell, "RUN": _run,
             "COPY": _copy, "ADD": lambda *a: _copy(*a, add=True)}
