#!/bin/bash
cat > /app/ratelimit.py <<'EOF'
"""A token-bucket rate limiter."""

import time


class TokenBucket:
    def __init__(self, rate, capacity, clock=time.monotonic):
        if rate <= 0 or capacity <= 0:
            raise ValueError("rate and capacity must be positive")
        self.rate = rate
        self.capacity = capacity
        self._clock = clock
        self._tokens = float(capacity)
        self._last = clock()

    def _refill(self):
        now = self._clock()
        self._tokens = min(self.capacity, self._tokens + (now - self._last) * self.rate)
        self._last = now

    @property
    def tokens(self):
        self._refill()
        return self._tokens

    def allow(self, n=1):
        if n > self.capacity:
            raise ValueError("more tokens than the bucket holds")
        self._refill()
        if self._tokens + 1e-9 >= n:
            self._tokens = max(0.0, self._tokens - n)
            return True
        return False

    def wait_time(self, n=1):
        if n > self.capacity:
            raise ValueError("more tokens than the bucket holds")
        self._refill()
        return max(0.0, (n - self._tokens) / self.rate)
EOF
