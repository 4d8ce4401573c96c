"""Tool-call parsers and tools: what a model turn asks for, and what the model reads back."""

import pytest

from tempering.agent.parsers import compact, get_parser, hermes
from tempering.agent.tools import execute, tool_schemas
from tempering.tasks.host import WorkspaceHost
from tempering.records import Budget, ExecReason, ExecResult, Task, ToolCall

ALL = ("run", "read", "write", "edit", "submit")


def test_hermes_reads_qwen_style_calls_and_names_what_is_malformed():
    text = ('I will look.\n<tool_call>\n{"name": "read", "arguments": {"path": "a.py"}}\n</tool_call>\n'
            '<tool_call>{"name": "run", "arguments": "{\\"command\\": \\"ls\\"}"}</tool_call>')
    assert hermes(text) == [ToolCall("read", {"path": "a.py"}), ToolCall("run", {"command": "ls"})]
    assert hermes("The answer is 42.") == []
    broken, = hermes('<tool_call>{"name": "read", "arguments": {"path": </tool_call>')
    assert broken.error_kind == "malformed" and "not valid JSON" in broken.error
    unclosed, = hermes('<tool_call>{"name": "read"}')
    assert unclosed.error == "malformed tool call: <tool_call> without </tool_call>"
    nameless, = hermes('<tool_call>{"arguments": {}}</tool_call>')
    assert nameless.error_kind == "malformed"
    listy, = hermes('<tool_call>{"name": "read", "arguments": [1]}</tool_call>')
    assert listy.name == "read" and listy.error_kind == "malformed"


def test_compact_reads_one_call_with_positional_arguments():
    assert compact("$read notes.txt") == [ToolCall("read", {"_positional": ["notes.txt"]})]
    assert compact("1247") == []
    write, = compact("$write a.txt\nline 1\nline 2")
    assert write.arguments == {"_positional": ["a.txt", "line 1\nline 2"]}
    assert compact("$ ")[0].error_kind == "malformed"
    with pytest.raises(ValueError, match="unknown tool-call parser 'xml'"):
        get_parser("xml")


def task(allowed=ALL, budget=Budget()):
    return Task(id="t", domain="files", prompt="", tools=allowed, budget=budget)


def run(call, files=None, allowed=ALL):
    host = WorkspaceHost(files or {"src/a.py": b"x = 1\nprint(x)\n"}, workdir="/app")
    return execute(call, task(allowed), host, turn=0), host


def test_file_tools_act_on_the_workspace():
    out, _ = run(ToolCall("read", {"path": "src/a.py"}))
    assert out.output == "x = 1\nprint(x)\n" and not out.error
    out, _ = run(ToolCall("read", {"path": "/app/src/a.py"}))  # absolute under the workdir
    assert out.output.startswith("x = 1")
    out, host = run(ToolCall("write", {"path": "b.txt", "content": "hi"}))
    assert host.files["b.txt"] == b"hi" and out.output == "wrote 2 bytes to b.txt"
    out, host = run(ToolCall("edit", {"path": "src/a.py", "old": "x = 1", "new": "x = 2"}))
    assert host.files["src/a.py"] == b"x = 2\nprint(x)\n"
    out, host = run(*compact("$edit src/a.py\nx = 1\nx = 3"))  # compact: the last parameter takes the rest
    assert host.files["src/a.py"] == b"x = 3\nprint(x)\n"


@pytest.mark.parametrize("call, kind, says", [
    (ToolCall("rm", {"path": "a"}), "unknown_tool", "unknown tool 'rm'"),
    (ToolCall("read", {}), "bad_arguments", "read needs path"),
    (ToolCall("read", {"path": "a", "mode": "r"}), "bad_arguments", "takes no argument 'mode'"),
    (ToolCall("read", {"path": [7]}), "bad_arguments", "must be a string or a number"),
    (ToolCall("read", {"path": "../etc/passwd"}), "tool", "outside the workspace /app"),
    (ToolCall("read", {"path": "/etc/passwd"}), "tool", "outside the workspace"),
    (ToolCall("read", {"path": "nope.txt"}), "tool", "no such file: nope.txt"),
    (ToolCall("edit", {"path": "src/a.py", "old": "x", "new": "y"}), "tool", "occurs 2 times"),
    (ToolCall("run", {"command": "ls"}), "tool", "no sandbox"),
])
def test_bad_calls_become_error_observations(call, kind, says):
    out, host = run(call)
    assert out.error_kind == kind and says in out.error and out.failed
    assert host.files == {"src/a.py": b"x = 1\nprint(x)\n"}  # nothing changed


def test_numbers_in_json_arguments_are_taken_as_their_text():
    out, host = run(ToolCall("write", {"path": "n.txt", "content": 3}))
    assert not out.error and host.files["n.txt"] == b"3"


def test_a_tool_the_task_does_not_allow_is_unknown_to_it():
    out, _ = run(ToolCall("write", {"path": "b", "content": ""}), allowed=("read",))
    assert out.error_kind == "unknown_tool" and "the tools are read" in out.error


def test_schemas_list_the_parameters():
    (read,) = tool_schemas(task(("read",)))
    assert read["function"]["name"] == "read"
    assert read["function"]["parameters"]["required"] == ["path"]


class RecordingHost(WorkspaceHost):
    """A host whose commands succeed at once, keeping the limits each was given."""

    def __init__(self):
        super().__init__({}, workdir="/app")
        self.limits = []

    def run(self, command, *, time_limit_s, memory_mb, turn):
        self.limits.append((time_limit_s, memory_mb))
        return ExecResult(reason=ExecReason.OK, exit_code=0, stdout="done\n")


def test_run_gives_the_task_limits_or_leaves_them_to_the_sandbox():
    """A budget without limits passes None: the sandbox session's configured defaults apply."""
    host = RecordingHost()
    for budget in (Budget(), Budget(time_limit_s=2.0, memory_mb=96)):
        out = execute(ToolCall("run", {"command": "true"}), task(budget=budget), host, turn=1)
        assert out.output == "done\n[exit code 0]" and not out.error
    assert host.limits == [(None, None), (2.0, 96)]
