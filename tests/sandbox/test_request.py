"""What an ExecRequest refuses before any backend sees it (file names that could leave the
workspace, invalid environment entries, limits that are not positive, files too large for the
job's memory), and how both backends read an exit status."""

from __future__ import annotations

import signal

import pytest

from tempering.records import ExecReason
from tempering.sandbox import ExecRequest
from tempering.sandbox.request import exit_reason


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


def test_exit_statuses_are_read_the_same_by_every_backend():
    assert exit_reason(0, out_of_memory=True) == ExecReason.OK  # it finished: an OOM-killed child is its business
    assert exit_reason(1, out_of_memory=True) == ExecReason.OOM
    assert exit_reason(-signal.SIGKILL, out_of_memory=True) == ExecReason.OOM
    assert exit_reason(-signal.SIGXCPU, out_of_memory=False) == ExecReason.TIMEOUT  # the CPU rlimit backstop
    assert exit_reason(-signal.SIGSEGV, out_of_memory=False) == ExecReason.KILLED
    assert exit_reason(3, out_of_memory=False) == ExecReason.NONZERO_EXIT
