"""What an ExecRequest refuses before any backend sees it: file names that could leave the
workspace, invalid environment entries, limits that are not positive, files too large for the
job's memory."""

from __future__ import annotations

import pytest

from tempering.sandbox import ExecRequest


@pytest.mark.parametrize("name", ["/etc/passwd", "../x", "a/../../x", "", "a//b", "./a", "a/", "nul\0"])
def test_file_names_that_could_leave_the_workspace_are_refused(name):
    with pytest.raises(ValueError, match="plain path inside the workspace"):
        ExecRequest(command=("true",), files={name: b"x"})
    with pytest.raises(ValueError, match="plain path inside the workspace"):
        ExecRequest(command=("true",), collect=(name,))


def test_nested_names_are_fine():
    assert ExecRequest(command=("true",), files={"a/b.txt": b"x"}, collect=("a/c.txt",)).files


@pytest.mark.parametrize("env", [{"": "v"}, {"A=B": "v"}, {"A\0": "v"}, {"A": "v\0"}])
def test_invalid_environment_entries_are_refused(env):
    with pytest.raises(ValueError, match="environment variable"):
        ExecRequest(command=("true",), env=env)


@pytest.mark.parametrize("limits", [{"time_limit_s": 0}, {"memory_mb": 0}, {"output_limit_bytes": -1}, {"pids": 0}])
def test_limits_must_be_positive(limits):
    with pytest.raises(ValueError, match="positive"):
        ExecRequest(command=("true",), **limits)


def test_an_empty_command_and_oversized_files_are_refused():
    with pytest.raises(ValueError, match="must name a program"):
        ExecRequest(command=())
    with pytest.raises(ValueError, match="quarter of memory_mb"):
        ExecRequest(command=("true",), memory_mb=16, files={"big": b"x" * (4 << 20 | 1)})
