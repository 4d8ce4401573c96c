"""What a task needs from the toolchain, read from its shell scripts and Dockerfile RUN lines.

Harbor tasks do not declare their needs; their scripts install them. `find` reads shell text
for the installers Terminal-Bench scripts call: `apt-get|apt install PKG...`, `pip|pip3
install PKG...` (also `python -m pip`, `uv pip install`: into the environment, `python`),
`uvx|uv run --with PKG` / `-w PKG` (a fresh environment for that one command, `isolated`)
and the command uvx runs (`uvx pytest ...`: the toolchain must have `pytest`). Requirements
are kept as written, versions included: package layers honour them (`packages`). Package
names that hold shell variables are left out (they cannot be known before running), and so
are local paths and URLs (`pip install .`: nothing is built from them offline). It runs
nothing; `Toolchain.missing` and `packages` compare the result with what the sandbox offers.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from tempering.sandbox.toolchain.shims import PIP_VALUED, UV_VALUED, requirement_name

_SEPARATORS = re.compile(r"&&|\|\||;|\||\n|\(|\)|`|\$\(")
_REDIRECTION = re.compile(r"\d*(?:>>?|<<?|&>>?|>&|<&)(.*)")  # 2>&1, > log, >>log, &>/dev/null
_APT_VALUED = {"-o", "-t", "--target-release", "-c"}


@dataclass(frozen=True)
class Needs:
    python: tuple[str, ...] = ()  # requirement strings as written ("numpy==2.3.0"), installed into the environment
    apt: tuple[str, ...] = ()
    commands: tuple[str, ...] = ()
    isolated: tuple[str, ...] = ()  # uvx's --with: a fresh environment for one command ("pytest==8.4.1")

    def __or__(self, other: "Needs") -> "Needs":
        pairs = ((self.python, other.python), (self.apt, other.apt), (self.commands, other.commands),
                 (self.isolated, other.isolated))
        return Needs(*(tuple(dict.fromkeys(a + b)) for a, b in pairs))

    @property
    def apt_names(self) -> list[str]:
        return [spec.split("=")[0].split(":")[0] for spec in self.apt]


def find(script: str) -> Needs:
    """The packages the installer commands in shell text `script` ask for."""
    python, apt, commands, isolated = [], [], [], []
    text = script.replace("\\\n", " ")
    for command in _SEPARATORS.split(text):
        try:
            words = _unredirected(shlex.split(command, comments=True))
        except ValueError:
            continue  # an unbalanced quote across our split: not an installer line we can read
        while words and (words[0] in ("sudo", "env", "exec", "time") or "=" in words[0]):
            words.pop(0)
        if not words:
            continue
        tool = words[0].rsplit("/", 1)[-1]
        if tool in ("apt-get", "apt") and "install" in words:
            apt += _operands(words[words.index("install") + 1:], _APT_VALUED)
        elif re.fullmatch(r"pip3?(\.\d+)?", tool) and words[1:2] == ["install"]:
            python += _operands(words[2:], PIP_VALUED)
        elif re.fullmatch(r"python3?(\.\d+)?", tool) and words[1:4] == ["-m", "pip", "install"]:
            python += _operands(words[4:], PIP_VALUED)
        elif tool == "uv" and words[1:3] == ["pip", "install"]:
            python += _operands(words[3:], PIP_VALUED)
        elif tool == "uvx" or (tool == "uv" and words[1:2] == ["run"]):
            rest = words[1 if tool == "uvx" else 2:]
            isolated += _withs(rest)  # consumes the options: the command is next
            commands += rest[:1]
    known = lambda items: tuple(dict.fromkeys(i for i in items if "$" not in i))  # noqa: E731
    packages = lambda items: known(i for i in items if requirement_name(i) is not None)  # noqa: E731
    return Needs(packages(python), known(apt), known(commands), packages(isolated))


def _unredirected(words: list[str]) -> list[str]:
    """`words` without their redirections (and the file a bare `>` names)."""
    out, target = [], False
    for word in words:
        if target:
            target = False
        elif (m := _REDIRECTION.fullmatch(word)) is not None:
            target = not m.group(1)
        else:
            out.append(word)
    return out


def _operands(words: list[str], valued: set[str]) -> list[str]:
    """The non-option words of an install command (option values skipped)."""
    out, skip = [], False
    for word in words:
        if skip:
            skip = False
        elif word.startswith("-"):
            skip = word in valued or word in ("-r", "--requirement", "-e", "--editable")
        else:
            out.append(word)
    return out


def _withs(words: list[str]) -> list[str]:
    """`--with X`, `-w X` and `--with=X` of a uvx / uv run command line, removed from `words`
    with the other options, up to its command."""
    out = []
    while words and words[0].startswith("-"):
        opt = words.pop(0)
        name, eq, value = opt.partition("=")
        if name in ("-w", "--with"):
            value = value if eq else (words.pop(0) if words else "")
            out += [v for v in value.split(",") if v]
        elif name in UV_VALUED and not eq and words:
            words.pop(0)
    return out
