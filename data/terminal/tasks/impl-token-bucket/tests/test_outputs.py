import pytest
from ratelimit import TokenBucket


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


def test_starts_full_and_refills():
    c = Clock()
    b = TokenBucket(rate=2, capacity=5, clock=c)
    assert b.tokens == pytest.approx(5)
    assert all(b.allow() for _ in range(5))
    assert not b.allow()
    c.t += 0.5
    assert b.tokens == pytest.approx(1)
    assert b.allow() and not b.allow()
    c.t += 100
    assert b.tokens == pytest.approx(5)


def test_allow_n_and_wait_time():
    c = Clock()
    b = TokenBucket(rate=4, capacity=10, clock=c)
    assert b.allow(7)
    assert not b.allow(4)
    assert b.tokens == pytest.approx(3)
    assert b.wait_time(4) == pytest.approx(0.25)
    assert b.wait_time(3) == pytest.approx(0.0)
    c.t += 0.25
    assert b.allow(4)
    assert b.tokens == pytest.approx(0)


def test_fractional():
    c = Clock()
    b = TokenBucket(rate=0.5, capacity=1, clock=c)
    assert b.allow()
    c.t += 1.0
    assert not b.allow()
    assert b.wait_time() == pytest.approx(1.0)
    c.t += 1.0
    assert b.allow()


def test_errors():
    with pytest.raises(ValueError):
        TokenBucket(0, 1)
    with pytest.raises(ValueError):
        TokenBucket(1, 0)
    b = TokenBucket(1, 3, clock=Clock())
    with pytest.raises(ValueError):
        b.allow(4)
    with pytest.raises(ValueError):
        b.wait_time(4)


def test_uses_the_given_clock():
    c = Clock()
    b = TokenBucket(rate=1, capacity=2, clock=c)
    b.allow(2)
    assert not b.allow()
    c.t += 1
    assert b.allow()
