"""The C wire module (``_wire.c``) against its pure-Python twins: the same bytes from
``encode_deliver``, the same answers and errors from ``quick_props``, and from ``scan_publishes``
the events the frame loop's Python path (``ChannelFrames.whole_publish``) makes of the same bytes,
for well-formed reads and for damaged ones. The whole protocol suite also runs in pure-Python mode
(the last test), so the fallback passes the same tests."""

from __future__ import annotations

import os
import random
import struct
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from headrace.server.amqp import _wire, compiled
from headrace.server.amqp import methods as m
from headrace.server.amqp.channel_frames import ChannelFrames
from headrace.queues import Message, QueueEntry
from headrace.server.amqp.codec import encode_deliver_py, encode_delivers_py, encode_frame, encode_method_frame
from headrace.server.amqp.content import PendingContent
from headrace.server.amqp.events import ContentReceived, Event
from headrace.server.amqp.frame_writer import FrameWriter
from headrace.server.amqp.properties import BasicProperties, encode_properties, quick_props_py
from headrace.server.amqp.spec import FRAME_END
from headrace.server.amqp.tables import FrameSyntaxError

PURE = os.environ.get("HEADRACE_PURE_PYTHON") == "1"


def test_the_install_built_the_c_module() -> None:
    """`pip install` builds ``_wire`` where a C compiler is (the Makefile's `compiler` target makes
    sure one is), and it is used unless HEADRACE_PURE_PYTHON=1 says otherwise."""
    assert compiled.ACCELERATED is not PURE
    assert (compiled.WIRE is None) is PURE


def _props() -> list[bytes]:
    """Property lists of the shapes publishers send, and some no publisher should."""
    out = [b"", b"\x00", b"\x00\x00", encode_properties(BasicProperties())]
    for props in (
        BasicProperties(delivery_mode=2),
        BasicProperties(delivery_mode=1, priority=5),
        BasicProperties(content_type="text/plain", delivery_mode=2, timestamp=1700000000),
        BasicProperties(expiration="1500", priority=4, delivery_mode=2),
        BasicProperties(correlation_id="c", reply_to="r", expiration="60000", message_id="m"),
        BasicProperties(headers={"a": 1, "b": "x"}, expiration="10", priority=1),
        BasicProperties(content_type="a", content_encoding="b", headers={"k": [1, 2]}, delivery_mode=2,
                        priority=9, correlation_id="c", reply_to="r", expiration="é", message_id="m",
                        timestamp=5, type="t", user_id="u", app_id="app", cluster_id="cl"),
    ):
        raw = encode_properties(props)
        out.append(raw)
        out.extend(raw[:cut] for cut in range(2, len(raw)))  # every truncation
    out.append(b"\x01\x00\x10\x00\x02")  # a second flag word
    out.append(b"\x01\x00")
    out.append(b"\x01\x00\x00\x00\xff\xfe")  # an expiration that is not UTF-8
    return out


def _answer(fn: Any, raw: bytes) -> Any:
    try:
        return fn(raw)
    except FrameSyntaxError as exc:
        return ("FrameSyntaxError", str(exc))


@pytest.mark.parametrize("raw", _props())
def test_quick_props_answers_as_the_python_one(raw: bytes) -> None:
    _wire.setup_props(FrameSyntaxError, quick_props_py)  # properties.py's own call (not made in pure mode)
    assert _answer(_wire.quick_props, raw) == _answer(quick_props_py, raw)


@pytest.mark.parametrize("body,frame_max", [(b"", 4096), (b"x", 4096), (b"y" * 4088, 4096), (b"z" * 4089, 4096),
                                            (bytes(range(256)) * 40, 4096), (b"w" * 9000, 0), (b"v" * 100, 131072)])
@pytest.mark.parametrize("redelivered", [False, True])
def test_encode_deliver_gives_the_python_bytes(body: bytes, frame_max: int, redelivered: bool) -> None:
    for args in ((1, "ctag", 1, redelivered, "", "q", b"\x00\x00", body, frame_max),
                 (65535, "ámq.ctag-" + "x" * 200, 2**64 - 1, redelivered, "amq.dïrect", "k" * 255,
                  encode_properties(BasicProperties(headers={"h": 1}, delivery_mode=2)), body, frame_max)):
        assert _wire.encode_deliver(*args) == encode_deliver_py(*args)


def test_encode_deliver_refuses_what_the_python_one_cannot_encode() -> None:
    with pytest.raises(ValueError):
        _wire.encode_deliver(1, "t" * 256, 1, False, "", "k", b"\x00\x00", b"b", 4096)
    with pytest.raises(TypeError):
        _wire.encode_deliver(1, "t", 1, False, "", "k", "not bytes", b"b", 4096)  # type: ignore[arg-type]


@pytest.mark.parametrize("frame_max", [4096, 0, 131072])
def test_encode_delivers_gives_each_deliver_of_the_python_one_in_tag_order(frame_max: int) -> None:
    props = encode_properties(BasicProperties(headers={"h": 1}, delivery_mode=2))
    entries = [QueueEntry(i, Message(i, exchange, key, raw, body), redelivered)
               for i, (exchange, key, raw, body, redelivered) in enumerate([
                   ("", "q", b"\x00\x00", b"", False), ("amq.dïrect", "k" * 255, props, b"y" * 4089, True),
                   ("x", "", b"\x10\x00\x02", bytes(range(256)) * 40, False)])]
    expected = b"".join(encode_deliver_py(7, "ctag", tag, e.redelivered, e.message.exchange, e.message.routing_key,
                                          e.message.props_raw, e.message.body, frame_max)
                        for tag, e in enumerate(entries, 2**32))
    assert _wire.encode_delivers(7, "ctag", 2**32, entries, frame_max) == expected
    _wire.setup_messages(Message, QueueEntry)  # from here the entries' slots are read straight
    assert _wire.encode_delivers(7, "ctag", 2**32, entries, frame_max) == expected
    assert encode_delivers_py(7, "ctag", 2**32, entries, frame_max) == expected
    assert _wire.encode_delivers(7, "ctag", 1, [], frame_max) == b""


def test_encode_delivers_refuses_what_encode_deliver_refuses() -> None:
    with pytest.raises(ValueError):
        _wire.encode_delivers(1, "t", 1, [QueueEntry(1, Message(1, "", "k" * 256, b"\x00\x00", b"b"))], 4096)
    with pytest.raises(AttributeError):
        _wire.encode_delivers(1, "t", 1, [object()], 4096)


# ---------------------------------------------------------------------------- scan_publishes

def _publish(channel: int, exchange: str, key: str, props: bytes, body: bytes, *, bits: int = 0,
             body_frames: int = 1) -> bytes:
    method = m.BasicPublish(exchange=exchange, routing_key=key, mandatory=bool(bits & 1), immediate=bool(bits & 2))
    out = encode_method_frame(channel, method) + encode_frame(2, channel, struct.pack(">HHQ", 60, 0, len(body))
                                                              + props)
    step = max(1, -(-len(body) // body_frames))
    for i in range(0, len(body), step):
        out += encode_frame(3, channel, body[i:i + step])
    return out


def _reads(rng: random.Random, count: int) -> bytes:
    """A pipelining client's bytes: mostly plain publishes, some of every other kind."""
    parts = []
    plain = encode_properties(BasicProperties(delivery_mode=2))
    for _ in range(count):
        kind = rng.random()
        channel = rng.choice((1, 1, 1, 2, 3))  # 3 is not open
        body = b"b" * rng.choice((1, 10, 64, 300))
        if kind < 0.6:
            parts.append(_publish(channel, "", "orders", plain, body))
        elif kind < 0.7:
            parts.append(_publish(channel, "amq.topic", f"k.{rng.randrange(3)}", _props()[rng.randrange(40)], body,
                                  bits=rng.randrange(4)))
        elif kind < 0.75:
            parts.append(_publish(channel, "x", "k", plain, body, body_frames=2))
        elif kind < 0.8:
            parts.append(_publish(channel, "x", "k", plain, b""))
        elif kind < 0.85:
            parts.append(encode_method_frame(channel, m.BasicAck(rng.randrange(1, 99), bool(rng.randrange(2)))))
        elif kind < 0.9:
            parts.append(_publish(channel, "x", "k", encode_properties(BasicProperties(headers={"h": "v"})), body))
        else:
            parts.append(_publish(channel, "x", "big", plain, b"B" * 2000))  # over max_message_size
    return b"".join(parts)


def _python_takes(frames: ChannelFrames, src: bytes, pos: int, end: int, limit: int) -> tuple[int, list[Event]]:
    """What the frame loop's Python path takes from ``pos`` on: ``whole_publish`` for as long as
    each frame is a publish method on an open, idle channel that it takes whole."""
    events: list[Event] = []
    while end - pos >= 7:
        frame_type, channel, size = struct.unpack_from(">BHI", src, pos)
        frame_end = pos + 7 + size
        if frame_type != 1 or size + 8 > limit or frame_end >= end or src[frame_end] != FRAME_END:
            break
        payload = src[pos + 7:frame_end]
        if not payload.startswith(b"\x00\x3c\x00\x28") or channel not in frames.open_channels \
                or channel in frames.content:
            break
        after = frames.whole_publish(src, frame_end + 1, end, channel, payload, limit, events)
        if not after:
            break
        pos = after
    return pos, events


def _fields(events: list[Any]) -> list[tuple[Any, ...]]:
    return [(e.channel, e.method, e.props_raw, e.body, e.body_size, e.headers) for e in events]


@pytest.mark.parametrize("seed", range(6))
def test_scan_publishes_takes_what_the_python_path_takes(seed: int) -> None:
    """Well-formed and damaged reads alike: the C scan's events are the Python path's, up to a
    publish it leaves to Python (a headers table or a second flag word); nothing else differs."""
    rng = random.Random(seed)
    frames = ChannelFrames(100, 1000, FrameWriter(4096))
    frames.open_channels.update((1, 2))
    _wire.setup_scan(ContentReceived, m.BasicPublish)  # channel_frames.py's own call (not made in pure mode)
    data = bytearray(_reads(rng, 150))
    if seed % 2:  # damage: flipped bytes anywhere, so every check meets a frame that fails it
        for _ in range(20):
            data[rng.randrange(len(data))] = rng.randrange(256)
    src = bytes(data)
    pos = 0
    taken = 0
    while pos < len(src):
        end = min(len(src), pos + rng.choice((7, 50, 500, 100000)))
        for limit in (4096, 60):
            frames.content.clear()
            if rng.random() < 0.1:
                frames.content[1] = PendingContent(m.BasicPublish())
            events: list[Event] = []
            after = _wire.scan_publishes(src, pos, end, limit, 1000, frames.open_channels, frames.content, events)
            py_after, py_events = _python_takes(frames, src, pos, end, limit)
            assert _fields(events) == _fields(py_events[:len(events)])
            if after != py_after:  # C stopped first, at a publish it leaves to Python
                assert after < py_after
                props = py_events[len(events)].props_raw
                assert props[1] & 1 or props[0] & 0x20, props
            taken += len(events)
        pos = after + 1 if after == pos else after
    assert taken > 50


def test_scan_publishes_shares_the_method_of_a_run() -> None:
    src = b"".join(_publish(1, "", "orders", b"\x10\x00\x02", b"m%d" % i) for i in range(5))
    src += _publish(1, "", "other", b"\x00\x00", b"last")
    events: list[Any] = []
    _wire.setup_scan(ContentReceived, m.BasicPublish)
    assert _wire.scan_publishes(src, 0, len(src), 4096, 1000, {1}, {}, events) == len(src)
    assert [e.body for e in events] == [b"m0", b"m1", b"m2", b"m3", b"m4", b"last"]
    assert len({id(e.method) for e in events[:5]}) == 1
    assert events[5].method == m.BasicPublish(0, "", "other", False, False)


def _python_message(i: int, props_raw: bytes, body: bytes) -> tuple[Any, ...] | None:
    """The fields of what ``RunPlacer.place``'s Python loop makes of one publish, None where it
    must read more than C does (a headers table, an expiration, a second flag word) or raises."""
    try:
        delivery_mode, priority, expiration, has_headers = quick_props_py(props_raw)
    except FrameSyntaxError:
        return None
    flags = props_raw[0] << 8 | props_raw[1] if len(props_raw) > 1 else 0
    if has_headers or expiration is not None or (flags & 1 and flags & 0xFFFE):
        return None
    return _slots(Message(100 + i, "ex", "key", props_raw, body, delivery_mode == 2, priority or 0, None, None, 5.0))


def _slots(obj: Any) -> tuple[Any, ...]:
    return tuple(getattr(obj, name) for name in obj.__slots__)


def test_make_messages_makes_what_the_python_loop_makes_and_stops_where_it_must_read_more() -> None:
    _wire.setup_messages(Message, QueueEntry)  # publish_runs.py's own call (not made in pure mode)
    props = _props()
    contents = [(raw, b"body %d" % i) for i, raw in enumerate(props)]
    expected = [_python_message(i, raw, body) for i, (raw, body) in enumerate(contents)]
    start = 0
    while start < len(contents):
        out: list[Message] = []
        stop = _wire.make_messages(contents, start, 100, "ex", "key", 5.0, out)
        assert [_slots(made) for made in out] == expected[start:stop]
        assert all(type(made.id) is int and type(made.priority) is int for made in out)
        if stop < len(contents):  # what it left: the Python path's to read (or to refuse)
            raw = contents[stop][0]
            assert expected[stop] is None or raw[1] & 1, raw
        start = stop + 1


def test_make_entries_makes_fresh_entries_counting_up() -> None:
    _wire.setup_messages(Message, QueueEntry)
    messages = [Message(i, "", "q", b"\x00\x00", b"x") for i in range(5)]
    made = _wire.make_entries(7, messages)
    assert [_slots(entry) for entry in made] == [_slots(QueueEntry(seq, message))
                                                  for seq, message in zip(range(7, 12), messages)]
    assert _wire.make_entries(1, []) == []


def test_the_object_makers_refuse_a_class_whose_fields_they_do_not_know() -> None:
    """A field added to Message in Python is a loud error at setup, not an object half made."""
    @dataclass(slots=True)
    class Other:
        id: int
        exchange: str

    with pytest.raises(TypeError):
        _wire.setup_messages(Other, QueueEntry)
    with pytest.raises(TypeError):
        _wire.setup_scan(Other, m.BasicPublish)
    _wire.setup_messages(Message, QueueEntry)
    _wire.setup_scan(ContentReceived, m.BasicPublish)


def test_the_protocol_suite_passes_in_pure_python_mode() -> None:
    """HEADRACE_PURE_PYTHON=1: the codec and connection tests pass on the Python twins alone."""
    here = Path(__file__).parent
    files = [str(here / name) for name in ("test_amqp_codec.py", "test_amqp_connection.py", "test_amqp_client.py")]
    env = dict(os.environ, HEADRACE_PURE_PYTHON="1")
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *files,
                          str(Path(__file__)) + "::test_the_install_built_the_c_module"],
                         env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "[100%]" in run.stdout
