"""The tools an episode may call, and carrying out one call against the episode's workspace.

Five tools: `run` (a shell command in the sandbox session), `read` (a file), `write` (a file),
`edit` (replace one unique string in a file) and `submit` (end the episode). Files are read and
written host-side on the workspace (no sandbox job); only `run` executes anything, confined by
the sandbox with the task's per-command limits. `execute` never raises for what the model asked:
an unknown tool, a tool the task does not allow, missing or wrong arguments, a path outside the
workspace or a failed command come back as the call's `error` (or a failed `result`), which the
model reads as its observation. `tool_schemas` gives the OpenAI-style function definitions that
chat templates print into the prompt. Rendering results into tokens is `agent.observation`'s.
"""

from __future__ import annotations

import dataclasses
import json
import posixpath
from typing import Mapping

from tempering.jsonvalue import JSON
from tempering.records import Budget, ExecReason, ExecResult, Task, ToolCall
from tempering.tasks import get_domain
from tempering.tasks.host import Param, Tool, ToolError, ToolHost


MAX_OUTPUT_CHARS = 4000  # of a command's output or a file, before the observation's token cap


def _run(args: dict[str, str], host: ToolHost, budget: Budget, turn: int) -> tuple[str, ExecResult | None]:
    result = host.run(("bash", "-c", args["command"]), time_limit_s=budget.time_limit_s,
                      memory_mb=budget.memory_mb, turn=turn)
    if result.reason == ExecReason.SANDBOX_ERROR:
        # Not the model's doing: the reward service marks the sample failed (never trained on).
        return "[the sandbox failed; this is not your fault]", result
    output = _clip(result.stdout + result.stderr)
    status = {ExecReason.OK: "exit code 0", ExecReason.NONZERO_EXIT: f"exit code {result.exit_code}"}.get(
        result.reason, result.reason.value)
    return f"{output}{'' if not output or output.endswith(chr(10)) else chr(10)}[{status}]", result


def _read(args: dict[str, str], host: ToolHost, budget: Budget, turn: int) -> tuple[str, ExecResult | None]:
    data = host.read_file(_path(args["path"], host))
    if data is None:
        raise ToolError(f"no such file: {args['path']}")
    return _clip(data.decode(errors="replace")), None


def _write(args: dict[str, str], host: ToolHost, budget: Budget, turn: int) -> tuple[str, ExecResult | None]:
    host.write_file(_path(args["path"], host), args["content"].encode())
    return f"wrote {len(args['content'].encode())} bytes to {args['path']}", None


def _edit(args: dict[str, str], host: ToolHost, budget: Budget, turn: int) -> tuple[str, ExecResult | None]:
    path = _path(args["path"], host)
    data = host.read_file(path)
    if data is None:
        raise ToolError(f"no such file: {args['path']}")
    text, old = data.decode(errors="replace"), args["old"]
    count = text.count(old) if old else 0
    if count != 1:
        raise ToolError(f"the text to replace must occur exactly once in {args['path']}; it occurs {count} times")
    host.write_file(path, text.replace(old, args["new"]).encode())
    return f"edited {args['path']}", None


def _submit(args: dict[str, str], host: ToolHost, budget: Budget, turn: int) -> tuple[str, ExecResult | None]:
    return "submitted", None


TOOLS: dict[str, Tool] = {t.name: t for t in (
    Tool("run", "Run a bash command in the workspace and return its output and exit status.",
         (Param("command", "the command line"),), _run),
    Tool("read", "Return the contents of a file in the workspace.", (Param("path", "the file's path"),), _read),
    Tool("write", "Create or overwrite a file in the workspace.",
         (Param("path", "the file's path"), Param("content", "the whole new content")), _write),
    Tool("edit", "Replace a string that occurs exactly once in a file.",
         (Param("path", "the file's path"), Param("old", "the exact text to replace"),
          Param("new", "the text to put in its place")), _edit),
    Tool("submit", "Say the work is done; the episode ends and is graded.", (), _submit, ends_episode=True),
)}


def tools_for(task: Task) -> dict[str, Tool]:
    """The tools `task`'s episodes may call: the common ones and its domain's own, as it lists them."""
    table = {**TOOLS, **get_domain(task.domain).tools}
    return {name: table[name] for name in task.tools if name in table}


def execute(call: ToolCall, task: Task, host: ToolHost, turn: int) -> ToolCall:
    """Carry out `call` (as parsed) for an episode of `task`. -> the call with `output`, or
    `error`, and the sandbox `result` of a command."""
    if call.error:
        return call
    tools = tools_for(task)
    tool = tools.get(call.name)
    if tool is None:
        return dataclasses.replace(call, error=f"unknown tool {call.name!r}; the tools are {', '.join(task.tools)}",
                                   error_kind="unknown_tool")
    try:
        args = bind_arguments(tool, call.arguments)
    except ToolError as e:
        return dataclasses.replace(call, error=str(e), error_kind="bad_arguments")
    try:
        output, result = tool.call(args, host, task.budget, turn)
    except ToolError as e:
        return dataclasses.replace(call, error=str(e), error_kind="tool")
    return dataclasses.replace(call, output=output, result=result)


def ends_episode(call: ToolCall, task: Task) -> bool:
    tool = tools_for(task).get(call.name)
    return tool is not None and tool.ends_episode and not call.error


def bind_arguments(tool: Tool, given: Mapping[str, JSON]) -> dict[str, str]:
    """The call's arguments by parameter name, all strings; positional ones (compact format)
    fill the parameters in order, the last taking every remaining line."""
    if "_positional" in given:
        first, *rest = list(given["_positional"]) or [""]
        tail = rest[0].split("\n", max(len(tool.params) - 2, 0)) if rest and len(tool.params) > 1 else []
        given = dict(zip([p.name for p in tool.params], [first, *tail] if tool.params else []))
    missing = [p.name for p in tool.params if p.name not in given]
    if missing:
        raise ToolError(f"{tool.name} needs {', '.join(missing)}")
    unknown = sorted(set(given) - {p.name for p in tool.params})
    if unknown:
        raise ToolError(f"{tool.name} takes no argument {unknown[0]!r}")
    # Chat models write numbers as JSON numbers ({"page": 3}): take scalars as their text.
    scalars = {k: json.dumps(v) if isinstance(v, bool) else str(v) for k, v in given.items()
               if isinstance(v, (bool, int, float))}
    bad = [k for k, v in given.items() if not isinstance(v, str) and k not in scalars]
    if bad:
        raise ToolError(f"{tool.name}: argument {bad[0]!r} must be a string or a number")
    return {**given, **scalars}


def _path(path: str, host: ToolHost) -> str:
    """A workspace-relative path for `path` (relative, or absolute under the workdir)."""
    full = posixpath.normpath(posixpath.join(host.workdir, path))
    if full != host.workdir and not full.startswith(host.workdir.rstrip("/") + "/"):
        raise ToolError(f"{path}: outside the workspace {host.workdir}")
    rel = posixpath.relpath(full, host.workdir)
    if rel == ".":
        raise ToolError(f"{path}: a directory, not a file")
    return rel


def _clip(text: str) -> str:
    if len(text) <= MAX_OUTPUT_CHARS:
        return text
    half = MAX_OUTPUT_CHARS // 2
    return f"{text[:half]}\n[... {len(text) - 2 * half} characters cut ...]\n{text[-half:]}"


def tool_schemas(task: Task) -> list[dict]:
    """OpenAI-style function definitions of `task`'s tools, for chat templates' `tools` argument."""
    return [{"type": "function", "function": {
        "name": t.name, "description": t.description,
        "parameters": {"type": "object", "required": [p.name for p in t.params],
                       "properties": {p.name: {"type": "string", "description": p.description} for p in t.params}}}}
        for t in tools_for(task).values()]
