"""`Deadlines`: callbacks in deadline order, on its one thread, none after `close`."""

import threading
import time

from tempering.reward.deadlines import Deadlines


def test_callbacks_run_in_deadline_order_on_one_thread():
    deadlines, ran, where, last = Deadlines("deadline-test"), [], set(), threading.Event()

    def note(i):
        ran.append(i)
        where.add(threading.current_thread().name)
        if i == 2:
            last.set()

    now = time.monotonic()
    deadlines.at(now + 0.2, lambda: note(2))
    deadlines.at(now + 0.1, lambda: note(1))
    deadlines.at(now - 1.0, lambda: note(0))  # already past: runs first
    assert last.wait(60)
    assert ran == [0, 1, 2] and where == {"deadline-test"}
    deadlines.close()


def test_nothing_runs_after_close():
    deadlines, ran = Deadlines("deadline-test"), []
    deadlines.at(time.monotonic() + 0.05, lambda: ran.append("early"))
    deadlines.close()
    deadlines.at(time.monotonic() - 1.0, lambda: ran.append("after close"))
    deadlines._thread.join(60)  # it ends at close, without running what was left
    assert ran == [] and not deadlines._thread.is_alive()
