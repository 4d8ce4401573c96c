"""Running a job's `__main__` in this interpreter and ending the process as CPython's main would.

`run` executes an `Invocation` in the namespace `fresh.become` prepared: -c code compiled as
"<string>", a script compiled from the source `pycommand.read_script` read (with __file__,
__cached__ and a SourceFileLoader as CPython sets them), or a module through
runpy._run_module_as_main, as `python3 -m` does. It ends the process the way CPython's
Py_RunMain does: SystemExit's code (None: 0, an int: that, anything else printed: 1), any
other uncaught exception shown through sys.excepthook with this module's frames cut from its
traceback (exit status 1), an uncaught KeyboardInterrupt as death by SIGINT; `finalize`
then ends the process as CPython's finalization would.

The guest's frames below `__main__` count against the recursion limit, so the limit is raised
by their depth: a job recurses exactly as deep as under a fresh interpreter, and
sys.getrecursionlimit() reports that much more than the default.
"""

from __future__ import annotations

import os
import sys
from types import ModuleType

from . import finalize
from .pycommand import Invocation

def run(inv: Invocation, main: ModuleType, startup_modules: frozenset[str]) -> None:
    """Run the job in `main` (sys.modules["__main__"]) and exit; never returns. The module is
    held here so that finalizing clears it, as CPython does, even once it left sys.modules;
    `startup_modules` are the interpreter's own (finalizing leaves them be)."""
    namespace = main.__dict__
    # The job's module frame sits as deep as the probe's frame (run -> _execute -> exec ->
    # module, against C -> module under a fresh interpreter); under -m, runpy is one call
    # from here but a C entry away under CPython, so one less.
    extra = _recursion_depth() - (1 if inv.mode == "m" else 0)
    sys.setrecursionlimit(sys.getrecursionlimit() + max(0, extra))
    outcome = None
    try:
        _execute(inv, namespace)
    except BaseException as e:  # the interpreter's own top level: whatever escapes is handled below
        outcome = e
    # Out of the except clause: under CPython nothing is being handled while the excepthook,
    # atexit callbacks and finalizers run, so what they raise chains to nothing.
    if isinstance(outcome, SystemExit):
        finalize.end(_exit_status(outcome), startup_modules)
    status = 0
    if outcome is not None:
        reported = _report(outcome)
        if isinstance(outcome, KeyboardInterrupt) and reported is None:
            finalize.die_by_sigint()
        status = 1 if reported is None else reported
    _forget_script(inv, namespace)
    finalize.end(status, startup_modules)


def _forget_script(inv: Invocation, namespace: dict) -> None:
    if inv.mode == "script":  # CPython removes these once the script has run, before finalizing
        namespace.pop("__file__", None)
        namespace.pop("__cached__", None)


def _execute(inv: Invocation, namespace: dict) -> None:
    if inv.mode == "c":
        exec(compile(inv.target, "<string>", "exec", dont_inherit=True), namespace)
    elif inv.mode == "script":
        filename = os.path.join(os.getcwd(), inv.target)  # absolute, not normalized, as CPython's
        namespace["__file__"], namespace["__cached__"] = filename, None
        # CPython takes the loader class from the frozen bootstrap, importing nothing.
        bootstrap = sys.modules["_frozen_importlib_external"]
        namespace["__loader__"] = bootstrap.SourceFileLoader("__main__", filename)
        exec(compile(inv.source, filename, "exec", dont_inherit=True), namespace)
    else:
        import runpy

        runpy._run_module_as_main(inv.target, True)


def _exit_status(e: SystemExit) -> int:
    """CPython's handling of an uncaught SystemExit (_Py_HandleSystemExit)."""
    code = e.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code if -(1 << 63) <= code < (1 << 63) else -1  # PyLong_AsLong overflows to -1
    if sys.stderr is not None:
        sys.stderr.write(f"{code}\n")
    else:
        os.write(2, f"{code}\n".encode(errors="backslashreplace"))
    return 1


def _report(e: BaseException) -> int | None:
    """Show an uncaught exception as PyErr_Print does; an exit status if the hook itself
    raised SystemExit, else None."""
    tb = e.__traceback__ = finalize.job_frames(e.__traceback__)
    sys.last_type, sys.last_value, sys.last_traceback = type(e), e, tb
    hook = getattr(sys, "excepthook", None)
    if hook is None:
        sys.stderr.write("sys.excepthook is missing\n")
        sys.__excepthook__(type(e), e, tb)
        return None
    try:
        hook(type(e), e, tb)
    except SystemExit as hook_exit:
        return _exit_status(hook_exit)
    except BaseException as hook_error:  # reported as CPython reports a failing hook
        hook_tb = hook_error.__traceback__ = finalize.job_frames(hook_error.__traceback__)
        sys.stderr.write("Error in sys.excepthook:\n")
        sys.__excepthook__(type(hook_error), hook_error, hook_tb)
        sys.stderr.write("\nOriginal exception was:\n")
        sys.__excepthook__(type(e), e, tb)
    return None


def _recursion_depth() -> int:
    """The interpreter's recursion depth at this function's frame (C entries into the
    evaluator count too, so counting frames is not enough): CPython names it when it refuses
    a limit below it. 0 if the message is not understood."""
    limit = sys.getrecursionlimit()
    try:
        sys.setrecursionlimit(1)
    except RecursionError as e:
        words = str(e).replace(":", " ").split()
        if "depth" in words[:-1] and words[words.index("depth") + 1].isdigit():
            return int(words[words.index("depth") + 1])
    sys.setrecursionlimit(limit)
    return 0
