"""The byte formats between host and guest: length-prefixed JSON frames and one-byte tags.

Frames are a 4-byte big-endian length and a UTF-8 JSON object; file contents travel base64
encoded inside them. JSON, never pickle, because the host reads what the guest sends. Every
reader takes a size limit and raises `ProtocolError` (a ValueError) on anything malformed.
The control socket carries HELLO once, then PREPARE (host: make the next job's init) and
PREPARED (zygote: here is the socket to that init). On an init's socket: READY (sent with
the init's credentials once it is prepared), JOB (host: the job's stdin, stdout and stderr,
then a frame with the spec), the init's report frame, or ERROR (a frame {"error": ...}). A
frame whose object holds "tail": N is followed by N raw bytes (the tar archives of a job's
filesystems, which would cost a third more as base64 and twice the memory inside JSON).
"""

from __future__ import annotations

import array
import base64
import json
import os
import socket
import struct

HELLO, PREPARE, PREPARED = b"H", b"P", b"D"
READY, JOB, ERROR = b"R", b"J", b"E"
JOB_FDS = 3  # the job's stdin (read end), stdout and stderr (write ends)

_HEADER = struct.Struct(">I")
_CREDS = struct.Struct("3i")  # struct ucred: pid, uid, gid


class ProtocolError(ValueError):
    """The other side sent something that is not a well-formed message."""


def encode_frame(obj: dict) -> bytes:
    data = json.dumps(obj, separators=(",", ":")).encode()
    return _HEADER.pack(len(data)) + data


def send_frame(sock: socket.socket, obj: dict) -> None:
    sock.sendall(encode_frame(obj))


def recv_frame(sock: socket.socket, limit: int) -> dict:
    """Blocking read of one frame of at most `limit` bytes."""
    (n,) = _HEADER.unpack(recv_exact(sock, _HEADER.size))
    if n > limit:
        raise ProtocolError(f"frame of {n} bytes exceeds the {limit}-byte limit")
    return decode_body(recv_exact(sock, n))


def decode_body(data: bytes) -> dict:
    try:
        obj = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ProtocolError(f"frame is not JSON: {e}") from None
    if not isinstance(obj, dict):
        raise ProtocolError("frame is not a JSON object")
    return obj


def tail_size(obj: dict, limit: int) -> int:
    """How many raw bytes follow the frame `obj` (its "tail"); ProtocolError past `limit`."""
    n = obj.get("tail", 0)
    if not isinstance(n, int) or isinstance(n, bool) or not 0 <= n <= limit:
        raise ProtocolError(f"a frame's tail of {n!r} bytes is not a size within {limit} bytes")
    return n


class FrameReader:
    """Incremental frame decoding for a non-blocking reader: `feed` bytes as they arrive;
    `frame` is the decoded object once it is complete, its raw tail (at most `tail_limit`
    bytes) included, which is then in `tail`."""

    def __init__(self, limit: int, tail_limit: int = 0) -> None:
        self.limit, self.tail_limit = limit, tail_limit
        self.buf = bytearray()
        self.frame: dict | None = None
        self.tail = b""
        self._head: dict | None = None  # the decoded object while its tail is still coming
        self._need = 0

    def feed(self, data: bytes) -> None:
        self.buf += data
        if self._head is None and len(self.buf) >= _HEADER.size:
            (n,) = _HEADER.unpack_from(self.buf)
            if n > self.limit:
                raise ProtocolError(f"frame of {n} bytes exceeds the {self.limit}-byte limit")
            if len(self.buf) >= _HEADER.size + n:
                self._head = decode_body(bytes(self.buf[_HEADER.size:_HEADER.size + n]))
                self._need = tail_size(self._head, self.tail_limit)
                del self.buf[:_HEADER.size + n]
        if self._head is not None:
            if len(self.buf) > self._need:
                raise ProtocolError("bytes after the end of the frame")
            if len(self.buf) == self._need:
                self.tail, self.frame = bytes(self.buf), self._head


def recv_exact(sock: socket.socket, n: int) -> bytearray:
    """Blocking read of exactly `n` bytes; ProtocolError if the stream ends first."""
    buf = bytearray(n)  # filled in place: a tail can hold megabytes of archives
    view, got = memoryview(buf), 0
    while got < n:
        k = sock.recv_into(view[got:], min(n - got, 1 << 20))
        if not k:
            raise ProtocolError(f"connection closed after {got} of {n} bytes")
        got += k
    return buf


def encode_files(files: dict[str, bytes]) -> dict[str, str]:
    return {name: base64.b64encode(data).decode() for name, data in files.items()}


def decode_files(obj: object, limit: int) -> dict[str, bytes]:
    if not isinstance(obj, dict):
        raise ProtocolError("files must be an object")
    out, total = {}, 0
    for name, text in obj.items():
        if not isinstance(text, str):
            raise ProtocolError(f"file {name!r} is not base64 text")
        try:
            out[name] = base64.b64decode(text, validate=True)
        except ValueError:
            raise ProtocolError(f"file {name!r} is not valid base64") from None
        total += len(out[name])
    if total > limit:
        raise ProtocolError(f"files hold {total} bytes, over the {limit}-byte limit")
    return out


def send_fds(sock: socket.socket, tag: bytes, fds: list[int]) -> None:
    sock.sendmsg([tag], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])


def recv_fds(sock: socket.socket, maxfds: int) -> tuple[bytes, list[int]]:
    """A one-byte tag and the descriptors that came with it (close-on-exec); b"" at end of
    stream. One byte exactly, so that on a stream socket a frame after the tag stays unread."""
    fds = array.array("i")
    # Room for credentials too: a socket with SO_PASSCRED gets them with every message.
    space = socket.CMSG_SPACE(maxfds * fds.itemsize) + socket.CMSG_SPACE(_CREDS.size)
    msg, ancdata, flags, _addr = sock.recvmsg(1, space, socket.MSG_CMSG_CLOEXEC)
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
    if flags & socket.MSG_CTRUNC:  # more descriptors than expected: refuse them all
        for fd in fds:
            os.close(fd)
        raise ProtocolError(f"a message carried more than {maxfds} descriptors")
    return msg, list(fds)


def send_ready(sock: socket.socket) -> None:
    """READY with our credentials, so the receiver learns our pid in its own pid namespace."""
    creds = _CREDS.pack(os.getpid(), os.getuid(), os.getgid())
    sock.sendmsg([READY], [(socket.SOL_SOCKET, socket.SCM_CREDENTIALS, creds)])


def recv_tag_and_pid(sock: socket.socket) -> tuple[bytes, int | None]:
    """A one-byte tag (b"" at end of stream) and its sender's pid, on a socket with SO_PASSCRED
    (HELLO, READY). One byte exactly, as `recv_fds`."""
    msg, ancdata, _flags, _addr = sock.recvmsg(1, socket.CMSG_SPACE(_CREDS.size))
    return msg, sender_pid(ancdata)


def sender_pid(ancdata: list) -> int | None:
    """The sender's pid from SCM_CREDENTIALS (the kernel translates it into our pid namespace)."""
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS and len(data) >= _CREDS.size:
            pid, _uid, _gid = _CREDS.unpack_from(data)
            return pid if pid > 0 else None
    return None
