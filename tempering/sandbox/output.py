"""A job's stdout and stderr as kept within `output_limit_bytes`: the head and the tail.

A program that prints more than the cap is not stopped for it (its deadline and CPU budget
bound how long it can go on): the first half of the cap is kept as it comes, stdout and
stderr together in their order of arrival, then each stream's latest bytes, and at the end
the tail room left is shared between the streams; where bytes were dropped, one line says how
many. What is kept never holds more than the cap, the marking lines aside; memory is bounded
by three times the cap. Both backends use it; it reads and runs nothing.
"""

from __future__ import annotations

STDOUT, STDERR = 0, 1


def marker(dropped: int, limit: int) -> bytes:
    """The line that stands where `dropped` bytes of a stream were cut."""
    return f"\n[... {dropped} bytes cut here: the output passed output_limit_bytes={limit} ...]\n".encode()


class Capture:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._head_room = limit // 2
        self._heads = (bytearray(), bytearray())
        self._tails = (bytearray(), bytearray())
        self._seen = [0, 0]

    def add(self, stream: int, data: bytes) -> None:
        """Take `data` that arrived on STDOUT or STDERR."""
        self._seen[stream] += len(data)
        take = min(len(data), self._head_room)
        if take:
            self._heads[stream].extend(data[:take])
            self._head_room -= take
            data = data[take:]
        if data:
            tail, room = self._tails[stream], self.limit - self.limit // 2
            tail.extend(data)
            if len(tail) > 2 * room:  # trimmed now and then, not at every chunk
                del tail[:len(tail) - room]

    @property
    def seen(self) -> int:
        """Bytes received, kept or not."""
        return sum(self._seen)

    @property
    def truncated(self) -> bool:
        return self.seen > self.limit

    def streams(self) -> tuple[bytes, bytes]:
        """(stdout, stderr) as kept: each stream's head, the marker where bytes were cut, its tail."""
        room = self.limit - len(self._heads[STDOUT]) - len(self._heads[STDERR])
        err = min(len(self._tails[STDERR]), room // 2)
        out = min(len(self._tails[STDOUT]), room - err)
        err = min(len(self._tails[STDERR]), room - out)
        kept = []
        for stream, n in ((STDOUT, out), (STDERR, err)):
            head, tail = self._heads[stream], self._tails[stream]
            dropped = self._seen[stream] - len(head) - n
            cut = marker(dropped, self.limit) if dropped > 0 else b""
            kept.append(bytes(head) + cut + bytes(tail[len(tail) - n:]))
        return kept[STDOUT], kept[STDERR]
