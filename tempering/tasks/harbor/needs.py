"""What a task needs from the toolchain, read from its shell scripts and Dockerfile RUN lines.

Harbor tasks do not declare their needs; their scripts install them. `find` reads shell text
for the installers Terminal-Bench scripts call: `apt-get|apt install PKG...`, `pip|pip3
install PKG...` (also `python -m pip`, `uv pip install`), `uvx|uv run --with PKG` / `-w PKG`
and the command uvx runs (`uvx pytest ...`: the toolchain must have `pytest`). Versions are kept in the
phrases but not compared: the offline shims accept whatever version is present. Package
names that hold shell variables are left out (they cannot be known before running). It runs
nothing; `Toolchain.missing` compares the result with what the sandbox offers.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

_SEPARATORS = re.compile(r"&&|\|\||;|\||\n|\(|\)|`|\$\(")
_PIP_VALUED = {"-i", "--index-url", "--extra-index-url", "-c", "--constraint", "-f", "--find-links", "-t",
               "--target", "--prefix", "--root", "--cache-dir", "--trusted-host", "--python", "--python-version"}
_UV_VALUED = {"-p", "--python", "--from", "--index-url", "--extra-index-url", "--index", "--cache-dir",
              "--directory", "--project"}
_APT_VALUED = {"-o", "-t", "--target-release", "-c"}


@dataclass(frozen=True)
class Needs:
    python: tuple[str, ...] = ()  # requirement strings as written ("pytest==8.4.1")
    apt: tuple[str, ...] = ()
    commands: tuple[str, ...] = ()

    def __or__(self, other: "Needs") -> "Needs":
        return Needs(*(tuple(dict.fromkeys(a + b)) for a, b in ((self.python, other.python), (self.apt, other.apt),
                                                                  (self.commands, other.commands))))

    @property
    def python_names(self) -> list[str]:
        return [re.split(r"[\[<>=!~;\s]", spec, maxsplit=1)[0] for spec in self.python]

    @property
    def apt_names(self) -> list[str]:
        return [spec.split("=")[0].split(":")[0] for spec in self.apt]


def find(script: str) -> Needs:
    """The packages the installer commands in shell text `script` ask for."""
    python, apt, commands = [], [], []
    text = script.replace("\\\n", " ")
    for command in _SEPARATORS.split(text):
        try:
            words = shlex.split(command, comments=True)
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
            python += _operands(words[2:], _PIP_VALUED)
        elif re.fullmatch(r"python3?(\.\d+)?", tool) and words[1:4] == ["-m", "pip", "install"]:
            python += _operands(words[4:], _PIP_VALUED)
        elif tool == "uv" and words[1:3] == ["pip", "install"]:
            python += _operands(words[3:], _PIP_VALUED)
        elif tool == "uvx" or (tool == "uv" and words[1:2] == ["run"]):
            rest = words[1 if tool == "uvx" else 2:]
            python += _withs(rest)  # consumes the options: the command is next
            commands += rest[:1]
    known = lambda items: tuple(dict.fromkeys(i for i in items if "$" not in i))  # noqa: E731
    return Needs(known(python), known(apt), known(commands))


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
        elif name in _UV_VALUED and not eq and words:
            words.pop(0)
    return out
