"""Ending a job's forked process the way CPython's finalization would, as far as a program sees.

`end` performs the steps of Py_FinalizeEx that a program can observe: non-daemon threads are
joined, atexit callbacks run, sys.stdout and sys.stderr are flushed (a failure is reported as
CPython reports it, and the exit status becomes 120), then the job's modules are torn down as
finalize_modules does: each leaves sys.modules in import order, the collector runs, and the
modules still alive have their globals cleared in reverse import order (single-underscore
names first), so that __del__ methods run and unclosed files are flushed. A last collection,
the standard streams and C stdio flushed, and os._exit.

It skips the interpreter's own teardown: the modules every interpreter starts with and the
guest's objects hold nothing of the job, and freeing them in a forked process would copy
megabytes of the zygote's memory just to release it (Py_Exit costs about 1.5 ms more CPU per
job). Objects a job hangs on those start-up modules (say, an attribute set on `sys`) are
therefore never finalized; CPython clears them too.
"""

from __future__ import annotations

import _weakref
import atexit
import gc
import os
import signal
import sys
from types import ModuleType

from . import syscalls


_GUEST_DIR = os.path.dirname(__file__)


def end(status: int, startup_modules: frozenset[str]) -> None:
    """Finalize and end the process with `status` (a C int, as exit() takes it); the modules
    named in `startup_modules` (but __main__) are the interpreter's, not the job's."""
    if not _wind_down():
        status = 120
    _teardown(startup_modules)
    for stream in (sys.stdout, sys.stderr):
        _flush_quietly(stream)
    syscalls.flush_c_stdio()
    os._exit(status & 0xFF)


def die_by_sigint() -> None:
    """CPython's end after an uncaught KeyboardInterrupt: finalize, then die by SIGINT."""
    _wind_down()
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGINT)
    os._exit(128 + signal.SIGINT)  # only if SIGINT could not end us


def job_frames(tb):
    """A traceback without the guest's frames: it starts at the job's own code, as under a
    fresh interpreter."""
    while tb is not None and os.path.dirname(tb.tb_frame.f_code.co_filename) == _GUEST_DIR:
        tb = tb.tb_next
    return tb


def _wind_down() -> bool:
    """Py_FinalizeEx's first steps: join non-daemon threads, run atexit callbacks, flush
    stdout and stderr. False if a flush failed."""
    threading = sys.modules.get("threading")
    if threading is not None:
        try:
            threading._shutdown()
        except Exception as e:  # whatever the job's threads raise: CPython reports it and goes on
            _unraisable(e, threading)
    _run_atexit()
    ok = True
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name, None)
        if stream is None or getattr(stream, "closed", False):
            continue
        try:
            stream.flush()
        except Exception as e:  # whatever a job's stream raises: CPython reports it, exits 120
            if name == "stdout":
                _unraisable(e, stream)
            ok = False
    return ok


def _run_atexit() -> None:
    """Run (and forget) the atexit callbacks. atexit reports what they raise itself; an error
    raised in C (a builtin callback) would carry this module's frame, where CPython, running
    them from no Python frame, shows none: a hook in between drops it."""
    hook = sys.unraisablehook

    def report(args) -> None:
        tb = job_frames(args.exc_traceback)
        hook(type(args)((args.exc_type, args.exc_value, tb, args.err_msg, args.object)))

    sys.unraisablehook = report
    try:
        atexit._run_exitfuncs()
    finally:
        if sys.unraisablehook is report:  # unless a callback installed a hook of its own
            sys.unraisablehook = hook


def _teardown(startup_modules: frozenset[str]) -> None:
    """finalize_modules for the job's modules: out of sys.modules (in import order, so that
    those only sys.modules held die in that order), a collection, then the globals of those
    still alive cleared, last imported first."""
    for name in ("stdin", "stdout", "stderr"):  # as CPython: the job's replacements are let go
        setattr(sys, name, getattr(sys, f"__{name}__", None))
    names = [name for name in sys.modules if name not in startup_modules or name == "__main__"]
    alive = []
    for name in names:
        module = sys.modules.pop(name, None)  # a __del__ may have removed it already
        if isinstance(module, ModuleType):
            alive.append(_weakref.ref(module))
        del module
    gc.collect()
    for ref in reversed(alive):
        module = ref()
        if module is not None:
            _clear_globals(module.__dict__)
        del module
    gc.collect()


def _clear_globals(namespace: dict) -> None:
    """_PyModule_ClearDict: every global set to None, single-underscore names first, as
    CPython does it, keeping __builtins__ for the __del__ methods that still run."""
    for first in (True, False):
        for key in list(namespace):
            if not isinstance(key, str) or namespace.get(key) is None or key == "__builtins__":
                continue
            if not first or (key[:1] == "_" and key[1:2] != "_"):
                namespace[key] = None


def _flush_quietly(stream) -> None:
    if stream is not None and not getattr(stream, "closed", False):
        try:
            stream.flush()
        except Exception:  # any error of a job's stream: CPython's last flush ignores it too
            pass


def _unraisable(e: BaseException, obj: object) -> None:
    """What PyErr_WriteUnraisable prints for an exception raised outside any Python frame."""
    if sys.stderr is None:
        return
    tb = e.__traceback__ = job_frames(e.__traceback__)  # the display reads it from the exception
    sys.stderr.write(f"Exception ignored in: {obj!r}\n")
    sys.__excepthook__(type(e), e, tb)
