"""Which command lines the guest runs in a fork of its interpreter, read as CPython reads them,
and which it leaves to an exec (anything it could not reproduce exactly)."""

from __future__ import annotations

import os

import pytest

from tempering.config import SandboxConfig
from tempering.sandbox.guest import pycommand

ENV = {"PATH": "/usr/bin", "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"}


def parse(*argv: str, **env: str):
    return pycommand.parse(["python3", *argv], {**ENV, **env}, "C.UTF-8")


def test_code_modules_and_scripts_with_their_arguments():
    c = parse("-c", "print(1)", "a", "-b")
    assert (c.mode, c.target, c.args, c.sys_argv) == ("c", "print(1)", ["a", "-b"], ["-c", "a", "-b"])
    assert c.argv == ["python3", "-c", "print(1)", "a", "-b"]
    m = parse("-m", "unittest", "-q")
    assert (m.mode, m.target, m.sys_argv) == ("m", "unittest", ["-m", "-q"])
    s = parse("-u", "main.py", "-c", "x")
    assert (s.mode, s.target, s.args, s.sys_argv, s.unbuffered) == ("script", "main.py", ["-c", "x"],
                                                                     ["main.py", "-c", "x"], True)
    assert parse("--", "-odd.py").target == "-odd.py"
    assert parse("-cpass").target == "pass" and parse("-c", "").target == ""


def test_flags_bundled_or_not_and_what_they_imply():
    a, b = parse("-I", "-S", "-c", "x"), parse("-ISc", "x")
    assert a.flags == b.flags
    assert a.flags == {"isolated": 1, "ignore_environment": 1, "no_user_site": 1, "no_site": 1,
                       "safe_path": True, "dont_write_bytecode": 0, "quiet": 0}  # -I ignores PYTHON*
    plain = parse("-c", "x").flags
    assert plain["dont_write_bytecode"] == 1 and plain["safe_path"] is False  # from the environment
    assert parse("-c", "x", PYTHONDONTWRITEBYTECODE="").flags["dont_write_bytecode"] == 0  # empty = unset
    assert parse("-c", "x", PYTHONUNBUFFERED="1").unbuffered
    assert parse("-E", "-c", "x", PYTHONPATH="/x").flags["ignore_environment"] == 1


@pytest.mark.parametrize("argv, env", [
    (("-O", "-c", "x"), {}), (("-X", "dev", "-c", "x"), {}), (("-W", "error", "-c", "x"), {}),
    (("-i", "-c", "x"), {}), (("-b", "-c", "x"), {}), (("--version",), {}), ((), {}), (("-",), {}),
    (("-u",), {}), (("-c",), {}), (("-m", ""), {}), (("-m",), {}),
    (("-c", "x"), {"PYTHONPATH": "/x"}), (("-c", "x"), {"PYTHONHASHSEED": "0"}),
    (("-c", "x"), {"PYTHONWARNINGS": "error"}), (("-I", "-c", "x"), {"LD_PRELOAD": "/x.so"}),
    (("-c", "x"), {"GLIBC_TUNABLES": "glibc.malloc.check=3"}), (("-c", "x"), {"LANG": "C"}),
    (("-c", "x"), {"LC_ALL": "C"}), (("-I", "-c", "x"), {"LANG": "en_US.UTF-8"}),
], ids=lambda v: " ".join(v) if isinstance(v, tuple) else ",".join(v) or "-")
def test_what_a_fork_cannot_reproduce_is_declined(argv, env):
    assert parse(*argv, **env) is None


def test_only_the_guests_own_interpreter_counts(tmp_path):
    guest = SandboxConfig().guest_python
    venv = tmp_path / "venv" / "bin"
    venv.mkdir(parents=True)
    (venv / "python3").symlink_to(os.path.realpath(guest))  # the same binary ...
    (tmp_path / "venv" / "pyvenv.cfg").write_text(f"home = {os.path.dirname(guest)}\n")
    assert pycommand.same_interpreter(guest, guest)
    assert not pycommand.same_interpreter(str(venv / "python3"), str(venv / "python3"))  # ... in a venv
    assert not pycommand.same_interpreter(str(venv / "python3"), guest)  # ... named from elsewhere
    assert not pycommand.same_interpreter(os.path.join(os.path.dirname(guest), "true"), guest)


def test_scripts_are_read_unless_cpython_would_run_them_otherwise(tmp_path):
    (tmp_path / "ok.py").write_bytes(b"# -*- coding: latin-1 -*-\nprint('\xe9')\n")
    (tmp_path / "nul.py").write_bytes(b"print(1)\0\n")
    (tmp_path / "compiled.pyc").write_bytes(b"")
    (tmp_path / "magic.py").write_bytes(pycommand.MAGIC_NUMBER + b"\0" * 12)
    (tmp_path / "app.py").write_bytes(b"print(1)\n" + b"PK\x05\x06" + b"\0" * 18)
    (tmp_path / "pkg").mkdir()
    assert pycommand.read_script(str(tmp_path / "ok.py")) == (tmp_path / "ok.py").read_bytes()
    for name in ("nul.py", "compiled.pyc", "magic.py", "app.py", "pkg", "missing.py"):
        assert pycommand.read_script(str(tmp_path / name)) is None, name
