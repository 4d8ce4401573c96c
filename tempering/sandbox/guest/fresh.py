"""Making a forked copy of the guest's interpreter look like a `python3` that just started.

The zygote's interpreter runs with -I -S -B, has imported the guest's modules and holds its own
environment, stdio and sys state. `Baseline` records, when the zygote starts, what the
interpreter held before any guest code ran, including copies of site and the modules it
imports that the zygote loaded first and the guest never touches; `forget_guest_modules`
then takes the guest's modules out of sys.modules, once for all jobs (a job that imports one
gets a fresh copy). `become` (in a job's forked process, after every isolation step) puts
the interpreter into the state CPython's start-up would have produced for the job's
`Invocation`: the job's environment (C environ, posix.environ, time zone), warnings filters
and no atexit callbacks, sys.flags, argv, orig_argv, executable, sys.path and
dont_write_bytecode, new stdio objects on fds 0-2 with CPython's buffering, sys.modules as at
start-up with a new `__main__`, site.main() unless -S, and sys.path[0].

It cannot undo what a fork shares with the zygote, none of which holds anything of another
job: the str hash seed and address-space layout (the same for every job of one sandbox), the
C-level state of extension modules the guest loaded, the guest's frames below `__main__`
on the stack, the guest's objects in memory (frozen for the collector), and /proc/self/cmdline
and /proc/self/environ, which show the zygote's. It does not run the job (`pymain` does).
"""

from __future__ import annotations

import _locale
import _warnings
import atexit
import builtins
import ctypes
import gc
import io
import os
import posix
import sys
import time
from types import ModuleType

from .pycommand import Invocation, same_interpreter

# What this module does to an interpreter relies on CPython internals (sys.flags' layout, the
# warnings and atexit modules' private hooks) as of 3.11, the version it is tested on; the zygote
# runs no job in a fork of any other interpreter.
SUPPORTED = sys.implementation.name == "cpython" and sys.version_info[:2] == (3, 11)
_FLAG_INDEX = {name: i for i, name in enumerate(getattr(type(sys.flags), "__match_args__", ()))}
# Looked up once here, in the zygote, rather than in every job's process.
_SET_ITEM = ctypes.pythonapi.PyStructSequence_SetItem
_SET_ITEM.argtypes, _SET_ITEM.restype = (ctypes.py_object, ctypes.c_ssize_t, ctypes.py_object), None
_INCREF = ctypes.pythonapi.Py_IncRef
_INCREF.argtypes, _INCREF.restype = (ctypes.py_object,), None


class Baseline:
    """What the guest's interpreter held at start-up, before any guest module was imported.
    A plain class rather than a dataclass, which would import inspect and its dependencies."""

    def __init__(self, modules: dict, path: list[str], importers: dict, site_modules: dict) -> None:
        """From what the zygote noted before importing the guest, and what is unchanged since."""
        self.modules = dict(modules)  # sys.modules, in import order
        self.site_modules = dict(site_modules)  # the same plus site and the modules it imports, never run
        self.path = tuple(path)
        self.importers = dict(importers)  # sys.path_importer_cache
        directory = os.path.dirname(sys.executable)
        names = {os.path.basename(sys.executable), "python3", f"python3.{sys.version_info.minor}", "python"}
        # the program paths that start this very interpreter
        self.interpreters = frozenset(p for p in (os.path.join(directory, n) for n in names)
                                      if os.path.exists(p) and same_interpreter(p, sys.executable))
        self.locale = _locale.setlocale(_locale.LC_CTYPE)  # the one a job must ask for
        self.stdio = tuple((s.encoding, s.errors) for s in (sys.stdin, sys.stdout, sys.stderr))
        self.warnings_filters = tuple(_warnings.filters)


def forget_guest_modules(base: Baseline) -> None:
    """In the zygote, once the guest has imported all it uses: sys.modules as at start-up,
    so that jobs' processes need not drop the guest's modules one by one (each drop writes to,
    and so copies, a page of the zygote's memory). The guest's code keeps its modules through
    its own globals; an import it runs later loads a fresh copy."""
    _keep_only(base.modules)


def become(base: Baseline, inv: Invocation, program: str, env: dict[str, str]) -> ModuleType:
    """Reset this interpreter for `inv`, started as `program` under `env`. Returns the new
    `__main__` module."""
    _set_environment(env)
    _warnings.filters[:] = base.warnings_filters
    _warnings._filters_mutated()
    atexit._clear()
    _set_flags(inv.flags)
    sys.dont_write_bytecode = bool(inv.flags["dont_write_bytecode"])
    sys.argv, sys.orig_argv = inv.sys_argv, list(inv.argv)
    sys.executable = sys._base_executable = program
    sys.path[:] = base.path
    # The finders noted at start-up are the ones a fresh interpreter has made by now (their
    # directory listings are of read-only system directories); the rest are the guest's.
    sys.path_importer_cache.clear()
    sys.path_importer_cache.update(base.importers)
    _set_stdio(base, inv.unbuffered)
    main = _reset_modules(base.modules if inv.flags["no_site"] else base.site_modules)
    if not inv.flags["no_site"]:
        # CPython imports site, whose import runs main(); the module is imported already.
        sys.modules["site"].main()
        sys.modules["site"] = sys.modules.pop("site")  # an import ends by moving it last
    if not inv.flags["safe_path"]:
        sys.path.insert(0, _path0(inv))
    gc.enable()
    gc.freeze()  # what the guest left in memory stays out of the job's collections
    return main


def _set_environment(env: dict[str, str]) -> None:
    """The job's environment in C (for its subprocesses), in posix.environ (from which a fresh
    `os` module builds os.environ) and in the time zone the `time` module computed at start."""
    for key in list(posix.environ):
        os.unsetenv(key)
    posix.environ.clear()
    for key, value in env.items():
        os.putenv(key, value)
        posix.environ[os.fsencode(key)] = os.fsencode(value)
    if "TZ" in env:  # the zygote's environment has none: otherwise `time` is already right
        time.tzset()


def _set_flags(values: dict[str, int]) -> None:
    """Rewrite fields of sys.flags in place: it is a struct sequence Python code cannot build."""
    for name, value in values.items():
        if getattr(sys.flags, name) != value or type(getattr(sys.flags, name)) is not type(value):
            _INCREF(value)  # SetItem steals a reference
            _SET_ITEM(sys.flags, _FLAG_INDEX[name], value)


def _set_stdio(base: Baseline, unbuffered: bool) -> None:
    """New stdio objects on fds 0-2, built as CPython's create_stdio builds them."""
    names = ("<stdin>", "<stdout>", "<stderr>")
    streams = []
    for fd, (name, (encoding, errors)) in enumerate(zip(names, base.stdio)):
        write = fd > 0
        buffering = 0 if unbuffered and write else -1
        buf = io.open(fd, "wb" if write else "rb", buffering, closefd=False)
        raw = buf if buffering == 0 else buf.raw
        raw.name = name
        line_buffering = not unbuffered and (raw.isatty() or fd == 2)
        stream = io.TextIOWrapper(buf, encoding, errors, "\n", line_buffering, unbuffered)
        stream.mode = "w" if write else "r"
        streams.append(stream)
    sys.stdin, sys.stdout, sys.stderr = sys.__stdin__, sys.__stdout__, sys.__stderr__ = streams


def _reset_modules(modules: dict) -> ModuleType:
    """sys.modules as `modules` (the same dict object: the import system holds it), with a
    new, empty __main__."""
    _keep_only(modules)
    sys.modules.update(modules)  # what is missing, in import order
    main = ModuleType("__main__")
    main.__loader__ = modules["__main__"].__loader__
    main.__annotations__ = {}
    main.__builtins__ = builtins
    sys.modules["__main__"] = main
    return main


def _keep_only(modules: dict) -> None:
    for name in list(sys.modules):
        if modules.get(name) is not sys.modules[name]:  # the guest's, or its own copy of os & co
            del sys.modules[name]


def _path0(inv: Invocation) -> str:
    """What CPython puts first on sys.path: "" for -c, the working directory for -m, the
    script's real directory for a script."""
    if inv.mode == "c":
        return ""
    if inv.mode == "m":
        return os.getcwd()
    return os.path.dirname(os.path.realpath(inv.target))
