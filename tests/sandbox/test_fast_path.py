"""The Python fast path against a real exec: the same job, run in a fork of the sandbox's own
interpreter and exec'd, gives the same result (exit status, stdout, stderr, collected files),
no job sees what an earlier one left in the interpreter, and what the guest cannot reproduce
exactly is exec'd. How command lines are read is in test_pycommand.py."""

from __future__ import annotations

import json
import re

import pytest

from sandbox_helpers import OnePath, needs_bwrap, py
from tempering.records import ExecReason
from tempering.sandbox import ExecRequest

pytestmark = needs_bwrap

RECURSE = "n = 0\ndef r():\n    global n\n    n += 1\n    r()\ntry:\n    r()\nexcept RecursionError:\n    print(n)\n"
SAME = {
    "exit_code": py("import sys; sys.exit(3)"),
    "exit_message": py("raise SystemExit('bye')"),
    "exit_out_of_range": py("raise SystemExit(2**70)"),
    "exit_code_mod_256": py("raise SystemExit(263)"),
    "chained_traceback": py("def f():\n    1/0\ntry:\n    f()\nexcept Exception as e:\n"
                            "    raise ValueError('v') from e"),
    "syntax_error": py("print("),
    "keyboard_interrupt": py("raise KeyboardInterrupt"),
    "excepthook": py("import sys\nsys.excepthook = lambda *a: print('hooked', a[0].__name__)\nraise OSError"),
    "failing_excepthook": py("import sys\ndef hook(*a):\n    print(sys.exc_info())\n    1/0\nsys.excepthook = hook\n"
                             "raise OSError"),
    "failing_atexit": py("import atexit, sys\natexit.register(int, 'x')\natexit.register(print, 'first')\n"
                         "sys.exit(2)"),
    "stdin": py("import sys\nfor line in sys.stdin:\n    print(line.strip()[::-1])\nprint(input.__name__)",
                stdin=b"abc\ndef\n"),
    "input": py("print(int(input()) + int(input()))", stdin=b"3\n4\n"),
    "argv": ExecRequest(command=("python3", "-c", "import sys; print(sys.argv, sys.orig_argv, sys.executable)",
                                 "a", "-b")),
    "main_module": py("import sys\nprint(__name__, sorted(vars()), __loader__, __spec__, sys.modules['__main__'])"),
    "script_and_sibling": ExecRequest(
        command=("python3", "main.py", "x"),
        files={"main.py": b"import sys, helper\nprint(__name__ == '__main__', __file__, sys.argv, sys.path[0],"
                          b" helper.f(), sorted(vars()))\nhelper.fail()\n",
               "helper.py": b"def f():\n    return 'helped'\ndef fail():\n    raise KeyError('k')\n"}),
    "script_in_a_directory": ExecRequest(command=("python3", "-B", "pkg/../pkg/run.py"),
                                         files={"pkg/run.py": b"import sys, os, near\nprint(sys.path[0], __file__,"
                                                              b" near.X, os.listdir('pkg'))\n",
                                                "pkg/near.py": b"X = 5\n"}),
    "isolated_no_site": ExecRequest(command=("python3", "-I", "-S", "-c",
                                             "import sys; print(sys.path, sys.flags, list(sys.modules), "
                                             "sorted(__builtins__.__dict__))")),
    "plain_interpreter": py("import sys, os; print(sys.path, sys.flags, list(sys.modules), dict(os.environ))"),
    "guest_not_importable": py("import guest"),
    "module": ExecRequest(command=("python3", "-m", "unittest", "-q", "test_arith"),
                          files={"test_arith.py": b"import unittest\nclass T(unittest.TestCase):\n"
                                                  b"    def test_a(self):\n        self.assertEqual(1, 1)\n"
                                                  b"    def test_b(self):\n        self.assertEqual(1, 2)\n"}),
    "finalization": py("import atexit, threading, time\nclass A:\n    def __del__(self):\n        print('del')\n"
                       "a = A()\nf = open('out.txt', 'w')\nf.write('unclosed')\natexit.register(print, 'atexit')\n"
                       "threading.Thread(target=lambda: (time.sleep(0.05), print('thread'))).start()",
                       collect=("out.txt",)),
    "failed_flush": py("import os\nprint('x')\nos.close(1)"),
    "recursion_depth": py(RECURSE),
    "recursion_depth_module": ExecRequest(command=("python3", "-m", "r"), files={"r.py": RECURSE.encode()}),
    "unbuffered": ExecRequest(command=("python3", "-u", "-c",
                                       "import sys; print([(s.encoding, s.errors, s.line_buffering, s.write_through,"
                                       " type(s.buffer).__name__) for s in (sys.stdin, sys.stdout, sys.stderr)])")),
    "process": py("import os, resource, signal\nprint(os.getpid(), os.getppid(), os.getsid(0) == os.getpid(),"
                  " os.getcwd(), sorted(os.listdir('/proc/self/fd')), open('/proc/self/oom_score_adj').read(),"
                  " [signal.getsignal(s) for s in (signal.SIGINT, signal.SIGPIPE, signal.SIGTERM)],"
                  " signal.pthread_sigmask(signal.SIG_BLOCK, []), resource.getrlimit(resource.RLIMIT_NOFILE),"
                  " [l for l in open('/proc/self/status') if l.startswith(('Cap', 'NoNewPrivs', 'Seccomp:'))])"),
    "time_zone": py("import time; print(time.tzname, time.timezone)", env={"TZ": "EST+5"}),
    "fork_in_the_job": py("import os\nif os.fork() == 0:\n    print('child')\nelse:\n    os.wait()\n"
                          "    print('parent')"),
    # The write must come before the deadline on both paths, an exec included: a limit
    # far above an interpreter's start-up even on a loaded machine.
    "timeout": py("open('partial.txt', 'w').write('so far')\nimport time\ntime.sleep(60)", time_limit_s=1.0,
                  collect=("partial.txt",)),
}


def both(sandbox, exec_sandbox, request: ExecRequest):
    """The request run in a fork of the guest's interpreter and exec'd, each checked for its path."""
    return OnePath(sandbox, True).run(request), OnePath(exec_sandbox, False).run(request)


# What a job prints that differs from run to run whichever path it takes: unittest's timing
# line ("Ran 2 tests in 0.001s"). Only the duration is replaced; the count stays compared.
_ELAPSED = re.compile(r"^(Ran \d+ tests? in )\d+\.\d+s$", re.MULTILINE)


def deterministic(text: str) -> str:
    return _ELAPSED.sub(r"\1<elapsed>s", text)


def outcome(r):
    """What the two paths must agree on: how the job ended, what it printed (less the durations
    it printed) and the files collected; never the measurements (wall_s, cpu_s, ...)."""
    return r.reason, r.exit_code, deterministic(r.stdout), deterministic(r.stderr), r.files


def test_only_the_durations_are_left_out_of_the_comparison():
    a, b = "Ran 2 tests in 0.000s\n\nFAILED (failures=1)\n", "Ran 2 tests in 0.013s\n\nFAILED (failures=1)\n"
    assert deterministic(a) == deterministic(b) == "Ran 2 tests in <elapsed>s\n\nFAILED (failures=1)\n"
    for other in ("Ran 3 tests in 0.000s\n\nFAILED (failures=1)\n", "Ran 2 tests in 0.000s\n\nOK\n"):
        assert deterministic(other) != deterministic(a)
    assert deterministic("done in 0.5s\n") == "done in 0.5s\n"  # anything else a job prints stays compared


@pytest.mark.parametrize("name", SAME)
def test_a_fork_gives_what_an_exec_gives(name, sandbox, exec_sandbox):
    fast, slow = both(sandbox, exec_sandbox, SAME[name])
    assert outcome(fast) == outcome(slow)


def test_the_cases_cover_what_they_claim(sandbox):
    """A few of the compared results, checked outright: equal but wrong would pass above."""
    assert sandbox.run(SAME["exit_code"]).exit_code == 3
    assert sandbox.run(SAME["keyboard_interrupt"]).exit_code == -2
    r = sandbox.run(SAME["script_and_sibling"])
    assert r.exit_code == 1 and "True /workspace/main.py ['main.py', 'x'] /workspace helped" in r.stdout
    assert r.stderr.startswith("Traceback (most recent call last):\n  File \"/workspace/main.py\", line 3")
    assert r.stderr.endswith("KeyError: 'k'\n") and "guest" not in r.stderr
    r = sandbox.run(SAME["finalization"])
    assert r.stdout == "thread\natexit\ndel\n" and r.files == {"out.txt": b"unclosed"}
    assert sandbox.run(SAME["failed_flush"]).exit_code == 120
    assert sandbox.run(SAME["recursion_depth"]).stdout == "999\n"
    r = sandbox.run(SAME["timeout"])
    assert r.reason == ExecReason.TIMEOUT and r.files == {"partial.txt": b"so far"}, r
    r = sandbox.run(SAME["module"])
    assert r.exit_code == 1 and "FAIL: test_b (test_arith.T" in r.stderr
    assert "\nRan 2 tests in <elapsed>s\n" in deterministic(r.stderr), r.stderr  # the line the comparison normalises
    r = sandbox.run(SAME["isolated_no_site"])
    assert "'os'" not in r.stdout and "isolated=1" in r.stdout and "'exit'" not in r.stdout, r.stdout


def test_a_job_never_sees_what_an_earlier_job_left(sandbox):
    """Each job is a fork of a zygote that never runs job code, so nothing a job does to the
    interpreter reaches the next one: not module state, builtins, sys, the environment or
    signal handlers."""
    leave = ("import builtins, json, os, signal, sys, _collections_abc\njson.LEFT = builtins.LEFT = sys.LEFT = 1\n"
             "sys.modules['left'] = json\nsys.path.append('/left')\nos.environ['LEFT'] = '1'\n"
             "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n_collections_abc.Sequence.register(dict)\n"
             "__import__('atexit').register(print, 'left')")
    look = ("import builtins, json, os, signal, sys, _collections_abc\n"
            "print(json.dumps([hasattr(json, 'LEFT'), hasattr(builtins, 'LEFT'), hasattr(sys, 'LEFT'),"
            " 'left' in sys.modules, '/left' in sys.path, 'LEFT' in os.environ, signal.getsignal(signal.SIGTERM) != 0,"
            " issubclass(dict, _collections_abc.Sequence)]))")
    for _ in range(3):  # both warm sandboxes, whichever order the pool hands them out
        assert sandbox.run(py(leave)).stdout == "left\n"
        r = sandbox.run(py(look))
        assert json.loads(r.stdout) == [False] * 8, r


def test_a_job_does_not_start_with_the_guests_modules(sandbox):
    r = sandbox.run(ExecRequest(command=("python3", "-I", "-S", "-c",
                                         "import sys; print(sorted(sys.modules))")))
    modules = set(eval(r.stdout))
    assert not modules & {"guest", "guest.job", "json", "socket", "ctypes", "os", "re"}, modules


@pytest.mark.parametrize("request_", [
    ExecRequest(command=("python3", "-O", "-c", "assert False; print('optimized')")),
    ExecRequest(command=("python3", "-c", "import sys; print(sys.path[1])"), env={"PYTHONPATH": "/opt"}),
    ExecRequest(command=("python3", "-c", "print(hash('a'))"), env={"PYTHONHASHSEED": "0"}),
    ExecRequest(command=("python3", "-c", "import sys; print(sys.stdout.encoding)"), env={"LANG": "C"}),
    ExecRequest(command=("python3", "-"), stdin=b"print('from stdin')"),
    ExecRequest(command=("/bin/python3", "-c", "import sys; print(sys.executable)")),
    ExecRequest(command=("python3", "main.pyc"), files={"main.pyc": b"not compiled"}),
], ids=["-O", "PYTHONPATH", "PYTHONHASHSEED", "LANG=C", "stdin", "/bin/python3", ".pyc"])
def test_what_the_guest_cannot_reproduce_is_execd(request_, sandbox, exec_sandbox):
    fast, slow = OnePath(sandbox, False).run(request_), exec_sandbox.run(request_)
    assert outcome(fast) == outcome(slow)


def test_telemetry_marks_the_path_and_the_switch_turns_it_off(sandbox, exec_sandbox):
    from sandbox_helpers import last_logged

    r = sandbox.run(py("print(1)"))
    assert r.ok and r.start == "warm" and last_logged(sandbox)["in_process"] is True
    exec_sandbox.run(py("print(1)"))
    assert last_logged(exec_sandbox)["in_process"] is False
