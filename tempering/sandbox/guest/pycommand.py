"""Whether a job's command is a Python invocation the guest can run in a fork of itself, and how.

`parse` reads a command line the way CPython's option parser does, but accepts only what a
forked copy of the guest's interpreter can reproduce exactly: `-c CODE`, `-m MODULE` or a
script path, after the flags -I -E -s -S -P -B -u -q (bundled or not). It also reads the
environment variables that shape an interpreter when it starts: PYTHONDONTWRITEBYTECODE,
PYTHONUNBUFFERED, PYTHONNOUSERSITE and PYTHONSAFEPATH are honoured; any other PYTHON*
variable (PYTHONPATH, PYTHONHASHSEED, PYTHONWARNINGS, ...) declines unless -E or -I, and so
does a locale other than the guest's, because the hash seed, the warning options and the
stdio encodings are fixed when an interpreter starts, and so do the variables the dynamic
loader and libc read only at exec (LD_*, MALLOC_*, GLIBC_TUNABLES, LOCPATH, GCONV_PATH).
Everything else (-O, -X, -W, -i, a program on stdin, long options) declines too: the job is
exec'd as before. `same_interpreter`
says whether a program path starts exactly the guest's interpreter; `read_script` reads a
script the way CPython would run it, declining compiled and zipped scripts. It runs nothing.
"""

from __future__ import annotations

import os
import stat
from _frozen_importlib_external import MAGIC_NUMBER

# sys.flags fields an invocation may set; the guest's own values for the rest are a fresh
# interpreter's (it runs with -I -S -B and nothing else that changes sys.flags).
FLAG_FIELDS = ("isolated", "ignore_environment", "no_user_site", "no_site", "safe_path",
               "dont_write_bytecode", "quiet")
_HONOURED_ENV = {"PYTHONDONTWRITEBYTECODE": "dont_write_bytecode", "PYTHONUNBUFFERED": "unbuffered",
                 "PYTHONNOUSERSITE": "no_user_site", "PYTHONSAFEPATH": "safe_path"}
_READ_AT_EXEC = ("LD_", "MALLOC_", "GLIBC_TUNABLES", "LOCPATH", "GCONV_PATH")  # prefixes and names
_SCRIPT_LIMIT = 64 << 20  # the request's files are far smaller; this bounds a read of anything else
_ZIP_END = b"PK\x05\x06"  # a zip archive's end-of-directory record: CPython runs it as a zipapp


class Invocation:
    """One Python command line: `mode` is "c", "m" or "script"; `target` the code, module
    name or script path as given; `args` what follows it; `flags` sys.flags values."""

    # A plain class: dataclasses would pull inspect and some twenty modules into the zygote,
    # and every job's process pays for each module the guest imported.
    def __init__(self, argv: list[str], mode: str, target: str, args: list[str], flags: dict[str, int],
                 unbuffered: bool) -> None:
        self.argv, self.mode, self.target, self.args = argv, mode, target, args
        self.flags, self.unbuffered = flags, unbuffered
        self.source = b""  # a script's contents, read by `read_script`

    @property
    def sys_argv(self) -> list[str]:
        return [self.target if self.mode == "script" else f"-{self.mode}", *self.args]


def parse(argv: list[str], env: dict[str, str], guest_locale: str) -> Invocation | None:
    """The invocation `argv` (argv[0] being the interpreter) asks for under `env`, or None
    when the guest cannot reproduce it exactly."""
    inv = _parse_options(argv)
    if inv is None or _effective_locale(env) != guest_locale:
        return None
    if any(value and key.startswith(_READ_AT_EXEC) for key, value in env.items()):
        return None
    if not inv.flags["ignore_environment"] and not _apply_environment(inv, env):
        return None
    inv.flags["safe_path"] = bool(inv.flags["safe_path"])  # sys.flags holds a bool there
    return inv


def _apply_environment(inv: Invocation, env: dict[str, str]) -> bool:
    """Apply the PYTHON* variables CPython reads at start-up; False if one cannot be honoured."""
    for key, value in env.items():
        if not key.startswith("PYTHON") or not value:  # CPython treats an empty value as unset
            continue
        if key not in _HONOURED_ENV:
            return False
        if _HONOURED_ENV[key] == "unbuffered":
            inv.unbuffered = True
        else:
            inv.flags[_HONOURED_ENV[key]] = 1
    return True


def _parse_options(argv: list[str]) -> Invocation | None:
    flags = dict.fromkeys(FLAG_FIELDS, 0)
    unbuffered = False
    i = 1
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            return _script(argv, i + 1, flags, unbuffered)
        if arg == "-":
            return None  # the program comes on stdin
        if not arg.startswith("-"):
            return _script(argv, i, flags, unbuffered)
        if arg.startswith("--"):
            return None  # --help, --version, --check-hash-based-pycs
        for j, opt in enumerate(arg[1:], start=2):
            if opt in "cm":
                if arg[j:]:
                    target, rest = arg[j:], argv[i + 1:]  # -cCODE: the rest of this argument
                elif i + 1 < len(argv):
                    target, rest = argv[i + 1], argv[i + 2:]
                else:
                    return None  # CPython: "Argument expected for the -c option"
                if opt == "m" and not target:
                    return None
                return Invocation(list(argv), opt, target, list(rest), flags, unbuffered)
            if opt == "I":
                flags.update(isolated=1, ignore_environment=1, no_user_site=1, safe_path=True)
            elif opt in _FLAG_OPTIONS:
                flags[_FLAG_OPTIONS[opt]] = 1
            elif opt == "u":
                unbuffered = True
            else:
                return None
        i += 1
    return None  # no program: an interactive interpreter


_FLAG_OPTIONS = {"E": "ignore_environment", "s": "no_user_site", "S": "no_site", "P": "safe_path",
                 "B": "dont_write_bytecode", "q": "quiet"}


def _script(argv: list[str], i: int, flags: dict, unbuffered: bool) -> Invocation | None:
    if i >= len(argv):
        return None
    return Invocation(list(argv), "script", argv[i], list(argv[i + 1:]), flags, unbuffered)


def _effective_locale(env: dict[str, str]) -> str:
    """The LC_CTYPE locale name setlocale(LC_CTYPE, "") picks from `env` (no installed-locale
    check: a locale other than the guest's declines anyway)."""
    for key in ("LC_ALL", "LC_CTYPE", "LANG"):
        if env.get(key):
            return env[key]
    return "C"


def same_interpreter(program: str, guest_executable: str) -> bool:
    """True when exec'ing `program` would start the guest's own interpreter with the same
    sys.prefix: the same binary, named from the same directory, and no virtual environment."""
    program = os.path.abspath(program)
    directory = os.path.dirname(program)
    if directory != os.path.dirname(guest_executable):
        return False
    if os.path.realpath(program) != os.path.realpath(guest_executable):
        return False
    return not any(os.path.exists(os.path.join(d, "pyvenv.cfg")) for d in (directory, os.path.dirname(directory)))


def read_script(path: str) -> bytes | None:
    """The source CPython would compile for `python3 path`, or None where it would do something
    else (a compiled .pyc, a zip application, a directory) or fail to open it (its own error
    message then comes from the exec'd interpreter)."""
    if path.endswith(".pyc"):
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > _SCRIPT_LIMIT:
            return None
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
    except OSError:
        return None
    finally:
        os.close(fd)
    source = b"".join(chunks)
    # A NUL byte is a SyntaxError when run from a file but a ValueError from compile().
    if source[:2] == MAGIC_NUMBER[:2] or _ZIP_END in source[-(1 << 16) - 22:] or b"\0" in source:
        return None
    return source
