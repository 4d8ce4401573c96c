"""The host/guest byte formats: frames round-trip, and malformed or oversized input is refused."""

from __future__ import annotations

import os
import socket

import pytest

from tempering.sandbox.guest import wire


def test_frames_round_trip_with_files():
    a, b = socket.socketpair()
    with a, b:
        wire.send_frame(a, {"files": wire.encode_files({"x": b"\x00\xff"}), "n": 3})
        got = wire.recv_frame(b, 1 << 20)
    assert got["n"] == 3 and wire.decode_files(got["files"], 10) == {"x": b"\x00\xff"}


def test_oversized_and_malformed_frames_are_refused():
    a, b = socket.socketpair()
    with a, b:
        wire.send_frame(a, {"big": "x" * 1000})
        with pytest.raises(wire.ProtocolError, match="exceeds"):
            wire.recv_frame(b, 100)
    reader = wire.FrameReader(100)
    with pytest.raises(wire.ProtocolError):
        reader.feed(wire.encode_frame({"ok": 1}) + b"trailing")
    with pytest.raises(wire.ProtocolError, match="not JSON"):
        wire.FrameReader(100).feed(b"\x00\x00\x00\x03abc")
    with pytest.raises(wire.ProtocolError, match="over the"):
        wire.decode_files(wire.encode_files({"a": b"x" * 20}), 10)
    with pytest.raises(wire.ProtocolError, match="base64"):
        wire.decode_files({"a": "!!"}, 10)


def test_frame_reader_completes_across_chunks():
    data = wire.encode_frame({"status": 0})
    reader = wire.FrameReader(100)
    for i in range(len(data)):
        assert reader.frame is None
        reader.feed(data[i:i + 1])
    assert reader.frame == {"status": 0}


def test_descriptors_and_credentials_travel():
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    c, d = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    c.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
    r, w = os.pipe()
    with a, b, c, d:
        wire.send_fds(a, wire.JOB, [r])
        tag, fds = wire.recv_fds(b, 4)
        assert tag == wire.JOB and len(fds) == 1
        os.write(w, b"through")
        assert os.read(fds[0], 7) == b"through"
        d.send(wire.READY)
        assert wire.recv_tag_and_pid(c) == (wire.READY, os.getpid())
    for fd in (r, w, *fds):
        os.close(fd)


def test_a_frame_with_a_tail_completes_only_with_all_of_it():
    data = wire.encode_frame({"status": 0, "tail": 5}) + b"abcde"
    reader = wire.FrameReader(100, tail_limit=5)
    for i in range(len(data)):
        assert reader.frame is None
        reader.feed(data[i:i + 1])
    assert reader.frame == {"status": 0, "tail": 5} and reader.tail == b"abcde"
    with pytest.raises(wire.ProtocolError, match="not a size within 4"):
        wire.FrameReader(100, tail_limit=4).feed(data)
    with pytest.raises(wire.ProtocolError, match="after the end"):
        wire.FrameReader(100, tail_limit=5).feed(data + b"f")
    a, b = socket.socketpair()
    with a, b:
        a.sendall(b"xyz")
        assert wire.recv_exact(b, 3) == b"xyz" and wire.recv_exact(b, 0) == b""
