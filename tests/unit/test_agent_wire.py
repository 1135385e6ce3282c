"""The agent protocol's framing: exact bytes, any cut of the stream, one size limit on read."""

from __future__ import annotations

import json
import random

import pytest

from hutch.providers.local.agent import wire


def test_a_frame_is_a_length_a_type_and_the_body() -> None:
    # pinned byte for byte: a native helper speaks exactly this
    assert wire.message({"type": "ping"}) == b'\x00\x00\x00\x0fJ{"type":"ping"}'
    assert wire.frame(wire.STDOUT, b"hi\n") == b"\x00\x00\x00\x03Ohi\n"
    assert wire.with_data({"type": "ok"}, b"abc") == b'\x00\x00\x00\x16J{"type":"ok","size":3}' + b"\x00\x00\x00\x03Dabc"
    assert wire.data(wire.DATA, b"") == b""


def test_frames_come_out_whole_whatever_the_reads_cut() -> None:
    big = bytes(random.getrandbits(8) for _ in range(3 * wire.MAX_FRAME // 2))
    stream = (
        wire.message({"type": "exec", "argv": ["sh", "-c", "echo é"], "env": {"K": "v"}})
        + wire.data(wire.STDIN, big)
        + wire.frame(wire.STDERR, b"")
        + wire.message({"type": "eof"})
    )
    for _ in range(5):
        reader = wire.Reader()
        got = []
        pos = 0
        while pos < len(stream):
            step = random.choice([1, 2, 5, 4096, 70000])
            reader.feed(stream[pos : pos + step])
            pos += step
            while (frame := reader.next()) is not None:
                got.append(frame)
        kinds = [k for k, _ in got]
        assert kinds == [wire.MESSAGE, wire.STDIN, wire.STDIN, wire.STDERR, wire.MESSAGE]
        assert wire.decode(got[0][1])["argv"] == ["sh", "-c", "echo é"]
        assert got[1][1] + got[2][1] == big
        assert len(got[1][1]) == wire.MAX_FRAME  # data is cut into frames of at most the limit
        assert wire.decode(got[4][1]) == {"type": "eof"}


def test_one_size_limit_is_enforced_on_read_and_on_write() -> None:
    reader = wire.Reader()
    reader.feed((wire.MAX_FRAME + 1).to_bytes(4, "big") + b"J")  # refused from its header alone
    with pytest.raises(wire.WireError, match="over the limit"):
        reader.next()
    with pytest.raises(wire.WireError, match="over the limit"):
        wire.frame(wire.MESSAGE, b"x" * (wire.MAX_FRAME + 1))
    with pytest.raises(wire.WireError, match="over the limit"):
        wire.message({"type": "exec", "env": {"BIG": "x" * wire.MAX_FRAME}})
    exact = wire.frame(wire.DATA, b"x" * wire.MAX_FRAME)
    reader = wire.Reader()
    reader.feed(exact)
    assert reader.next() == (wire.DATA, b"x" * wire.MAX_FRAME)


def test_unknown_frames_and_messages_that_are_not_objects_are_refused() -> None:
    reader = wire.Reader()
    reader.feed(b"\x00\x00\x00\x00Z")
    with pytest.raises(wire.WireError, match="unknown type"):
        reader.next()
    for body in (b"[1, 2]", b'{"no": "type"}', b'{"type": 3}', b"{nope"):
        with pytest.raises(wire.WireError):
            wire.decode(body)


def test_text_that_was_not_utf8_travels_as_escaped_surrogates() -> None:
    name = b"caf\xe9".decode("utf-8", "surrogateescape")  # a Latin-1 file name from os.listdir
    body = wire.message({"type": "ok", "name": name})[wire.HEADER :]
    assert body.isascii() and b"\\udce9" in body
    assert wire.decode(body)["name"].encode("utf-8", "surrogateescape") == b"caf\xe9"
    assert json.loads(body)["name"] == name


def test_missing_says_how_much_a_frame_still_needs() -> None:
    reader = wire.Reader()
    assert reader.missing() == wire.HEADER
    frame = wire.frame(wire.DATA, b"x" * 100)
    reader.feed(frame[:10])
    assert reader.missing() == len(frame) - 10
