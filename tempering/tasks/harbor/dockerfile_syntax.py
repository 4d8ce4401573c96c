"""A Dockerfile's syntax, read without interpreting it (`dockerfile` does that): the text as
(line number, KEYWORD, arguments) instructions, continuation lines joined and comments
dropped, and the words of one instruction: the JSON (exec) form, $VAR, ${VAR:-default} and
${VAR:+alternative} substitution, quoting, and ENV's KEY=VALUE pairs or its legacy one-pair
form. What cannot be read (another escape character, a dangling continuation, a malformed
ENV) raises `Unsupported`, as the interpreter does for what it cannot honour.
"""

from __future__ import annotations

import json
import re
import shlex
from typing import Mapping

_VAR = re.compile(r"\$(?:\{(\w+)(?::([-+])([^}]*))?\}|(\w+))")


class Unsupported(ValueError):
    """The Dockerfile asks for what an interpreted, offline build cannot do; says which line."""


def instructions(text: str) -> list[tuple[int, str, str]]:
    """(line number, KEYWORD, arguments) for each instruction, continuation lines joined."""
    lines = text.splitlines()
    for line in lines:
        m = re.match(r"#\s*(\w+)\s*=\s*(\S*)", line)
        if not m:
            break
        if m.group(1).lower() == "escape" and m.group(2) != "\\":
            raise Unsupported(f"Dockerfile line 1: escape character {m.group(2)!r} (only '\\' is supported)")
    out, buf, start = [], [], 0
    for number, line in enumerate(lines, 1):
        stripped = line.strip()
        if not buf and (not stripped or stripped.startswith("#")):
            continue
        if buf and stripped.startswith("#"):
            continue  # a comment inside a continued instruction
        if not buf:
            start = number
        if line.rstrip().endswith("\\"):
            buf.append(line.rstrip()[:-1])
            continue
        buf.append(line)
        joined = " ".join(part.strip() for part in buf if part.strip())
        keyword, _, args = joined.partition(" ")
        out.append((start, keyword.upper(), args.strip()))
        buf = []
    if buf:
        raise Unsupported(f"Dockerfile line {start}: the last instruction ends with a continuation")
    return out


def json_form(args: str) -> list[str] | None:
    """The arguments' exec form (a JSON array of strings), or None when they are in shell form."""
    if not args.startswith("["):
        return None
    try:
        argv = json.loads(args)
    except ValueError:
        return None
    return argv if isinstance(argv, list) and argv and all(isinstance(a, str) for a in argv) else None


def substitute(text: str, env: Mapping[str, str]) -> str:
    """`text` with $VAR, ${VAR}, ${VAR:-default} and ${VAR:+alternative} replaced from `env`
    (unset: empty)."""
    def value(m: re.Match) -> str:
        name = m.group(1) or m.group(4)
        current = env.get(name, "")
        if m.group(2) == "-":
            return current or m.group(3)
        if m.group(2) == "+":
            return m.group(3) if current else ""
        return current
    return _VAR.sub(value, text)


def unquote(value: str) -> str:
    """A value as written after ARG NAME=: the first shell word when quoted, else as it stands."""
    value = value.strip()
    return shlex.split(value)[0] if value and value[0] in "'\"" else value


def env_pairs(args: str, env: Mapping[str, str], number: int) -> dict[str, str]:
    """ENV's arguments (at line `number`) as {KEY: value}, values substituted from `env` and the
    pairs before them: KEY=VALUE words, or the legacy `ENV KEY the rest of the line`."""
    first = args.split(None, 1)[0] if args.strip() else ""
    if "=" not in first:  # the legacy form: ENV KEY the rest of the line
        key, _, value = args.strip().partition(" ")
        return {key: substitute(value.strip(), env)}
    try:
        words = shlex.split(args)
    except ValueError as e:
        raise Unsupported(f"Dockerfile line {number} (ENV): {e}") from None
    pairs = {}
    for word in words:
        key, eq, value = word.partition("=")
        if not eq:
            raise Unsupported(f"Dockerfile line {number} (ENV): {word!r} is not KEY=VALUE")
        pairs[key] = substitute(value, {**env, **pairs})
    return pairs
