"""The warm pool's bookkeeping with stand-in zygotes: warm and cold starts, preparation in the
background after dispatch, and replacement of zygotes that failed or misbehaved."""

from __future__ import annotations

from sandbox_helpers import wait_until
from tempering.sandbox.pool import WarmPool
from tempering.sandbox.zygote import ZygoteError


class FakeZygote:
    def __init__(self, n: int) -> None:
        self.n, self.prepared, self.closed, self.fail_next_prepare = n, 0, False, False

    def alive(self) -> bool:
        return not self.closed

    def close(self) -> None:
        self.closed = True


def make_pool(size: int):
    made = []

    def start():
        made.append(FakeZygote(len(made)))
        return made[-1]

    def prepare(z):
        if z.fail_next_prepare:
            raise ZygoteError("preparation failed")
        z.prepared += 1

    pool = WarmPool(size, start, prepare)
    pool.fill()
    return pool, made


def test_warm_then_prepared_again_after_dispatch():
    pool, made = make_pool(1)
    z, warm = pool.acquire()
    assert warm and z is made[0] and z.prepared == 1
    pool.dispatched(z)
    pool.release(z, healthy=True)
    again, warm = pool.acquire()  # waits for the background preparation rather than starting cold
    assert again is z and warm and z.prepared == 2 and len(made) == 1
    pool.release(again, healthy=True)
    pool.close()
    assert z.closed


def test_callers_beyond_the_pool_get_one_shot_cold_sandboxes():
    pool, made = make_pool(1)
    a, warm_a = pool.acquire()
    b, warm_b = pool.acquire()
    assert warm_a and not warm_b and b is made[1]
    pool.release(b, healthy=True)
    assert wait_until(lambda: b.closed)
    pool.release(a, healthy=True)
    assert not a.closed
    pool.close()


def test_failed_preparation_and_unhealthy_jobs_replace_the_zygote():
    pool, made = make_pool(1)
    z, _ = pool.acquire()
    z.fail_next_prepare = True
    pool.dispatched(z)
    pool.release(z, healthy=True)
    assert wait_until(lambda: z.closed)
    fresh, warm = pool.acquire()
    assert fresh is made[1] and not warm  # a cold start that joins the pool
    pool.release(fresh, healthy=False)
    assert wait_until(lambda: fresh.closed)
    pool.close()
