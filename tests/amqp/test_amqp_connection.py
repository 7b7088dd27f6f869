"""The sans-IO connection state machine: its lifecycle (handshake, open, closing, closed) and heartbeat
bookkeeping as tables, each fed whole, one byte at a time, in uneven pieces and with trailing data;
protocol violations and their reply codes; content assembly and property checks; channel ids."""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

import pytest
from amqp_support import (
    HEADER,
    HEARTBEAT,
    accept_opens,
    feed,
    handshake_bytes,
    last_method_payload,
    new_conn,
    open_bytes,
    publish_bytes,
    publish_with_properties,
    sent_methods,
)

from headrace.server.amqp import methods as m
from headrace.server.amqp.codec import encode_frame, encode_method_frame
from headrace.server.amqp.connection import AMQPConnection, ConnectionState
from headrace.server.amqp.errors import ChannelException
from headrace.server.amqp.events import (
    BadProtocolHeader,
    ChannelClosed,
    ChannelOpenRequested,
    ConnectionClosed,
    ConnectionCloseOk,
    ContentReceived,
    MethodReceived,
)
from headrace.server.amqp.properties import BasicProperties, encode_properties, quick_props

MODES = ["whole", "bytewise", "split", "trailing"]
PARTIAL = encode_method_frame(9, m.ChannelOpen())[:5]  # the start of a frame that has not all arrived


def describe(event: Any) -> tuple[Any, ...]:
    if isinstance(event, MethodReceived):
        return ("method", event.channel, event.method.NAME)
    if isinstance(event, ContentReceived):
        return ("content", event.channel, event.body)
    if isinstance(event, ChannelOpenRequested):
        return ("opened", event.channel)
    if isinstance(event, ChannelClosed):
        return ("channel-closed", event.channel, event.reply_code, event.by_peer)
    if isinstance(event, ConnectionClosed):
        return ("closed", event.reply_code, event.by_peer)
    if isinstance(event, ConnectionCloseOk):
        return ("close-ok",)
    assert isinstance(event, BadProtocolHeader)
    return ("bad-header",)


HANDSHAKE_EVENTS = [("method", 0, "connection.start-ok"), ("method", 0, "connection.tune-ok"),
                    ("method", 0, "connection.open")]


def server_close(conn: AMQPConnection) -> None:
    conn.close(reply_code=320, reply_text="CONNECTION_FORCED - broker shutdown")


def server_closes_channel_1(conn: AMQPConnection) -> None:
    conn.close_channel(1, ChannelException(406, "PRECONDITION_FAILED - test", 60, 40))


def method(channel: int, meth: Any) -> bytes:
    return encode_method_frame(channel, meth)


# (name, steps, events, final state, names of the methods sent). A step is bytes the client sends
# or a call the broker makes on the connection.
Step = bytes | Callable[[AMQPConnection], None]
LIFECYCLE: list[tuple[str, list[Step], list[tuple[Any, ...]], ConnectionState, list[str]]] = [
    ("handshake", [open_bytes()], HANDSHAKE_EVENTS, ConnectionState.OPEN, ["connection.start"]),
    ("heartbeats between frames are no events",
     [HEADER + HEARTBEAT + open_bytes()[8:] + HEARTBEAT + method(1, m.ChannelOpen()) + HEARTBEAT],
     [*HANDSHAKE_EVENTS, ("opened", 1)], ConnectionState.OPEN, ["connection.start", "channel.open-ok"]),
    ("a channel opened, used and closed by the peer",
     [open_bytes() + method(1, m.ChannelOpen()) + method(1, m.BasicQos(prefetch_count=5)) + publish_bytes(b"hi")
      + method(1, m.ChannelClose(200, "bye"))],
     [*HANDSHAKE_EVENTS, ("opened", 1), ("method", 1, "basic.qos"), ("content", 1, b"hi"),
      ("channel-closed", 1, 200, True)],
     ConnectionState.OPEN, ["connection.start", "channel.open-ok", "channel.close-ok"]),
    ("the broker closes a channel: what follows on it is dropped until close-ok",
     [open_bytes() + method(1, m.ChannelOpen()), server_closes_channel_1,
      method(1, m.BasicQos()) + publish_bytes(b"late") + method(1, m.ChannelCloseOk()) + method(1, m.ChannelOpen())],
     [*HANDSHAKE_EVENTS, ("opened", 1), ("opened", 1)],
     ConnectionState.OPEN, ["connection.start", "channel.open-ok", "channel.close", "channel.open-ok"]),
    ("open, close and open again in one read: each answer waits for the session's open-ok",
     [open_bytes() + method(1, m.ChannelOpen()) + method(1, m.ChannelClose(200, "bye")) + method(1, m.ChannelOpen())],
     [*HANDSHAKE_EVENTS, ("opened", 1), ("channel-closed", 1, 200, True), ("opened", 1)],
     ConnectionState.OPEN, ["connection.start", "channel.open-ok", "channel.close-ok", "channel.open-ok"]),
    ("an oversized publish right behind channel.open: its channel.close follows the open-ok",
     [open_bytes() + method(1, m.ChannelOpen()) + publish_bytes(b"x" * 200) + method(1, m.ChannelClose(200, "x"))
      + method(1, m.ChannelCloseOk())],
     [*HANDSHAKE_EVENTS, ("opened", 1), ("channel-closed", 1, 406, False)],
     ConnectionState.OPEN, ["connection.start", "channel.open-ok", "channel.close", "channel.close-ok"]),
    ("the peer closes the connection",
     [open_bytes() + method(0, m.ConnectionClose(200, "bye")) + method(1, m.ChannelOpen())],
     [*HANDSHAKE_EVENTS, ("closed", 200, True)], ConnectionState.CLOSED,
     ["connection.start", "connection.close-ok"]),
    ("the broker closes, the peer answers close-ok after frames in flight",
     [open_bytes() + method(1, m.ChannelOpen()), server_close,
      method(1, m.BasicQos()) + publish_bytes(b"in flight") + HEARTBEAT + method(0, m.ConnectionCloseOk())],
     [*HANDSHAKE_EVENTS, ("opened", 1), ("close-ok",)], ConnectionState.CLOSED,
     ["connection.start", "channel.open-ok", "connection.close"]),
    ("the broker and the peer close at once",
     [open_bytes(), server_close, method(0, m.ConnectionClose(200, "bye"))],
     [*HANDSHAKE_EVENTS, ("close-ok",)], ConnectionState.CLOSED,
     ["connection.start", "connection.close", "connection.close-ok"]),
    ("a protocol error, then the peer's close-ok",
     [open_bytes() + encode_frame(3, 1, b"stray body"), method(0, m.ConnectionCloseOk())],
     [*HANDSHAKE_EVENTS, ("closed", 505, False), ("close-ok",)], ConnectionState.CLOSED,
     ["connection.start", "connection.close"]),
    ("an error in the middle of the handshake",
     [HEADER + method(0, m.ConnectionStartOk({}, "PLAIN", b"\x00u\x00p", "en_US")) + method(0, m.ConnectionOpen())],
     [("method", 0, "connection.start-ok"), ("closed", 503, False)], ConnectionState.CLOSING,
     ["connection.start", "connection.close"]),
    ("the broker closes before the protocol header", [server_close, open_bytes()], [], ConnectionState.CLOSED, []),
]


def run(steps: list[Step], mode: str) -> tuple[AMQPConnection, list[Any]]:
    """Feed the steps, answering each channel.open as the session does."""
    conn = new_conn(max_message_size=100)
    events: list[Any] = []
    data_steps = [i for i, step in enumerate(steps) if isinstance(step, bytes)]
    for i, step in enumerate(steps):
        if not isinstance(step, bytes):
            step(conn)
            continue
        if mode == "trailing" and data_steps and i == data_steps[-1]:
            events += accept_opens(conn, conn.receive_data(step + PARTIAL))
        else:
            events += accept_opens(conn, feed(conn, step, "whole" if mode == "trailing" else mode))
    return conn, events


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("name", "steps", "events", "state", "sent"), LIFECYCLE, ids=[c[0] for c in LIFECYCLE])
def test_lifecycle(name, steps, events, state, sent, mode):
    conn, got = run(steps, mode)
    assert [describe(e) for e in got] == events
    assert conn.state is state
    assert [meth.NAME for _, meth in sent_methods(conn)] == sent
    if mode == "trailing" and state is ConnectionState.OPEN:
        assert bytes(conn._buf) == PARTIAL  # kept for the next read, not parsed early
    assert conn.receive_data(HEARTBEAT) == []


# Heartbeats: (name, negotiated heartbeat, steps). A step is ("tick", now, alive, heartbeat sent),
# ("recv", bytes), ("send",) for outbound traffic, or ("paused",) for peer_alive().
HEARTBEATS: list[tuple[str, int, list[tuple[Any, ...]]]] = [
    ("a silent peer is dead after two intervals; a heartbeat goes out each interval meanwhile", 2,
     [("tick", 0.0, True, False), ("tick", 1.0, True, True), ("tick", 2.0, True, False), ("tick", 3.0, True, True),
      ("tick", 4.0, True, False), ("tick", 4.5, False, False)]),
    ("any frame from the peer counts, a heartbeat too", 2,
     [("tick", 0.0, True, False), ("recv", HEARTBEAT), ("tick", 3.0, True, True),
      ("recv", method(0, m.ConnectionBlocked())), ("tick", 6.0, True, False), ("tick", 10.0, True, True),
      ("tick", 10.5, False, False)]),
    ("no heartbeat while we send anyway", 2,
     [("tick", 0.0, True, False), ("send",), ("tick", 1.0, True, False), ("tick", 2.0, True, True)]),
    ("a peer whose reads are paused counts as alive", 2,
     [("tick", 0.0, True, False), ("paused",), ("tick", 4.5, True, True), ("tick", 8.5, True, False),
      ("tick", 9.0, False, False)]),
    ("heartbeat 0: never dead, never sent", 0,
     [("tick", 0.0, True, False), ("tick", 1000.0, True, False), ("tick", 1e6, True, False)]),
]


@pytest.mark.parametrize("mode", ["whole", "bytewise", "trailing"])
@pytest.mark.parametrize(("name", "heartbeat", "steps"), HEARTBEATS, ids=[c[0] for c in HEARTBEATS])
def test_heartbeat_tick(name, heartbeat, steps, mode):
    conn, _ = run([open_bytes(heartbeat=heartbeat)], mode)
    assert conn.heartbeat == heartbeat
    conn.data_to_send()
    for step in steps:
        if step[0] == "recv":
            assert feed(conn, step[1], "whole" if mode == "trailing" else mode) == []
        elif step[0] == "send":
            conn.send_method(1, m.BasicQosOk())
            conn.data_to_send()
        elif step[0] == "paused":
            conn.peer_alive()
        else:
            _, now, alive, beat = step
            assert conn.tick(now) is alive, step
            out = conn.data_to_send()
            assert out == (HEARTBEAT if beat else b""), step


def test_no_heartbeat_is_sent_before_the_connection_is_open():
    conn = new_conn(heartbeat=1)
    conn.receive_data(HEADER)
    conn.data_to_send()
    assert conn.tick(0.0) and conn.tick(1.0) and conn.data_to_send() == b""
    assert not conn.tick(2.5)  # but silence still counts


@pytest.mark.parametrize("mode", ["whole", "bytewise", "split"])
def test_handshake_then_publish_with_multi_frame_body(mode):
    conn = new_conn()
    body = bytes(range(256)) * 10
    events = accept_opens(conn, feed(conn, handshake_bytes() + publish_bytes(body) + publish_bytes(b""), mode))
    kinds = [type(e) for e in events]
    assert kinds == [MethodReceived, MethodReceived, MethodReceived, ChannelOpenRequested, ContentReceived, ContentReceived]
    assert conn.state is ConnectionState.OPEN and conn.frame_max == 65536 and conn.channel_max == 100
    assert events[4].body == body and events[5].body == b""
    assert quick_props(events[4].props_raw)[0] == 2
    out = conn.data_to_send()
    assert out.count(b"\x00\x14\x00\x0b") == 1  # channel.open-ok


def _mixed_publishes() -> bytes:
    """Publishes of every shape a read can hold: one body frame (with and without a headers
    table), an empty body, a body over three frames, two channels' frames interleaved, one over
    max_message_size (closes its channel), and one on a channel that is not open any more."""
    headers = encode_properties(BasicProperties(headers={"a": 1, "b": "x"}, delivery_mode=2))
    ch2_method = encode_method_frame(2, m.BasicPublish(exchange="x", routing_key="two"))
    ch2_rest = encode_frame(2, 2, struct.pack(">HHQ", 60, 0, 3) + b"\x00\x00") + encode_frame(3, 2, b"two")
    return b"".join((
        publish_bytes(b"one"), publish_with_properties(headers), publish_bytes(b""),
        publish_bytes(bytes(range(256)) * 10),  # 1000-byte body frames
        ch2_method, encode_method_frame(1, m.BasicPublish(exchange="x", routing_key="k")), ch2_rest,
        encode_frame(2, 1, struct.pack(">HHQ", 60, 0, 1) + b"\x00\x00"), encode_frame(3, 1, b"1"),
        ch2_method, encode_frame(2, 2, struct.pack(">HHQ", 60, 0, 1) + b"\x00\x00"),  # two one-byte bodies
        encode_method_frame(1, m.BasicPublish(exchange="x", routing_key="k")),  # whose frames interleave
        encode_frame(2, 1, struct.pack(">HHQ", 60, 0, 1) + b"\x00\x00"), encode_frame(3, 2, b"w"),
        encode_frame(3, 1, b"v"),
        encode_method_frame(2, m.BasicPublish(exchange="x", routing_key="big")),  # in one body frame,
        encode_frame(2, 2, struct.pack(">HHQ", 60, 0, 3000) + b"\x00\x00"),  # over the 2800-byte
        encode_frame(3, 2, b"y" * 3000),  # limit: channel 2 closes
        publish_bytes(b"after", channel=1), publish_bytes(b"lost", channel=2),
    ))


@pytest.mark.parametrize("mode", ["whole", "split"])
def test_publishes_read_whole_give_the_events_of_frame_by_frame(mode):
    """A publish whose frames are all in one read takes a shortcut (``_whole_publish``): the events
    and the replies are those of the same bytes fed one at a time, which takes none."""
    outcomes = []
    for how in (mode, "bytewise"):
        conn = new_conn(max_message_size=2800)
        accept_opens(conn, conn.receive_data(handshake_bytes() + encode_method_frame(2, m.ChannelOpen())))
        conn.data_to_send()
        events = feed(conn, _mixed_publishes(), how)
        outcomes.append((events, conn.data_to_send(), sorted(conn.channels.open_channels)))
    assert outcomes[0] == outcomes[1]
    events = outcomes[0][0]
    bodies = [e.body for e in events if isinstance(e, ContentReceived)]
    assert bodies == [b"one", b"z", b"", bytes(range(256)) * 10, b"two", b"1", b"w", b"v", b"after"]
    assert [type(e) for e in events].count(ChannelClosed) == 1 and outcomes[0][2] == [1]


@pytest.mark.parametrize("mode", ["whole", "split"])
def test_a_publish_whose_header_comes_on_another_channel_fails_as_frame_by_frame(mode):
    header = struct.pack(">HHQ", 60, 0, 1) + b"\x00\x00"
    data = b"".join((encode_method_frame(2, m.BasicPublish(exchange="x", routing_key="two")),
                     encode_method_frame(1, m.BasicPublish(exchange="x", routing_key="one")),
                     encode_frame(2, 2, header), encode_frame(3, 1, b"1")))
    outcomes = []
    for how in (mode, "bytewise"):
        conn = new_conn()
        accept_opens(conn, conn.receive_data(handshake_bytes() + encode_method_frame(2, m.ChannelOpen())))
        conn.data_to_send()
        outcomes.append((feed(conn, data, how), conn.data_to_send()))
    assert outcomes[0] == outcomes[1]
    assert [type(e) for e in outcomes[0][0]] == [ConnectionClosed] and outcomes[0][0][0].reply_code == 505


def test_trailing_partial_frame_is_kept_for_the_next_read():
    conn = new_conn()
    data = handshake_bytes() + publish_bytes(b"abc")
    events = conn.receive_data(data[:-3])
    assert not any(isinstance(e, ContentReceived) for e in events)
    assert isinstance(conn.receive_data(data[-3:])[-1], ContentReceived)


@pytest.mark.parametrize(
    ("tail", "code"),
    [
        (encode_frame(3, 1, b"x"), 505),
        (encode_method_frame(1, m.BasicPublish()) + encode_method_frame(1, m.BasicQos()), 505),
        (encode_frame(1, 2, m.encode_method(m.BasicQos())), 504),
        (encode_method_frame(1, m.ChannelOpen()), 504),
        (encode_frame(7, 0, b""), 501),
        (b"\x01\x00\x01\xff\xff\xff\xff", 501),  # announced size above frame_max: refused before buffering
        (encode_frame(1, 1, b"\x00\x32\x00\x0a\x00"), 502),  # truncated queue.declare
        (encode_frame(8, 1, b""), 505),  # heartbeat on a channel: RabbitMQ's unexpected frame
        (encode_frame(8, 0, b"\x00"), 501),  # a heartbeat with a payload is no heartbeat
        (encode_method_frame(1, m.BasicPublish()) + encode_frame(2, 1, b"\x00\x32\x00\x00" + b"\x00" * 10), 505),
        (encode_method_frame(1, m.BasicPublish()) + encode_frame(2, 1, b"\x00\x3c\x00\x01" + b"\x00" * 10), 505),
    ],
)
def test_protocol_violations_close_the_connection_with_their_code(tail, code):
    conn = new_conn()
    events = conn.receive_data(handshake_bytes() + tail)
    closed = [e for e in events if isinstance(e, ConnectionClosed)]
    assert closed and closed[0].reply_code == code and not closed[0].by_peer
    assert conn.state is ConnectionState.CLOSING
    assert conn.receive_data(encode_method_frame(1, m.BasicQos())) == []  # ignored while closing


@pytest.mark.parametrize(
    "props_raw",
    [
        b"\x00\x01",  # continuation bit and no next word
        b"\x90\x01\x02",  # properties announced, continuation bit, one byte of a next word
        b"\x80\x00\x09abc",  # content type longer than the bytes left
        b"\x80\x00",  # content type announced, absent
        b"\x20\x00\x00\x00\x00\x05\x01aZxxx",  # headers table with an unknown field type
        b"\x00\x40" + b"\x00" * 7,  # timestamp one byte short
        b"\x10\x00\x02junk",  # bytes after the last announced property
    ],
)
def test_malformed_content_properties_close_the_connection_with_541(props_raw):
    conn = new_conn()
    events = conn.receive_data(handshake_bytes() + publish_with_properties(props_raw))
    assert not any(isinstance(e, ContentReceived) for e in events)
    assert [(e.reply_code, e.by_peer) for e in events if isinstance(e, ConnectionClosed)] == [(541, False)]
    assert conn.state is ConnectionState.CLOSING
    close = m.decode_method(last_method_payload(conn.data_to_send()))
    assert isinstance(close, m.ConnectionClose) and close.reply_code == 541
    assert close.reply_text.startswith("INTERNAL_ERROR - malformed content header properties")
    assert (close.class_id, close.method_id) == (60, 40)


@pytest.mark.parametrize("props_raw", [b"", b"\x00"])
def test_content_header_without_a_flag_word_is_a_frame_error(props_raw):
    conn = new_conn()
    events = conn.receive_data(handshake_bytes() + publish_with_properties(props_raw))
    assert [e.reply_code for e in events if isinstance(e, ConnectionClosed)] == [501]


@pytest.mark.parametrize(
    "props_raw",
    [
        b"\x00\x00",
        b"\x00\x01\x00\x00",  # a continuation word that is there
        b"\x00\x03\x00\x00",  # the reserved bit 1 is ignored, as RabbitMQ does
        encode_properties(BasicProperties(content_type="t", headers={"a": [1, {"b": b"c"}]}, delivery_mode=2,
                                          priority=1, timestamp=7, cluster_id="c")),
    ],
)
def test_well_formed_content_properties_pass_untouched(props_raw):
    conn = new_conn()
    events = conn.receive_data(handshake_bytes() + publish_with_properties(props_raw))
    content = [e for e in events if isinstance(e, ContentReceived)]
    assert len(content) == 1 and content[0].props_raw == props_raw and conn.state is ConnectionState.OPEN


def test_channel_ids_above_channel_max_open_and_channel_max_bounds_open_channels():
    conn = new_conn()
    events = conn.receive_data(HEADER + b"".join((
        encode_method_frame(0, m.ConnectionStartOk({}, "PLAIN", b"\x00u\x00p", "en_US")),
        encode_method_frame(0, m.ConnectionTuneOk(2, 65536, 0)),
        encode_method_frame(0, m.ConnectionOpen("/")),
        encode_method_frame(65535, m.ChannelOpen()),
        encode_method_frame(2048, m.ChannelOpen()),
        encode_method_frame(2048, m.ChannelClose()),
        encode_method_frame(3, m.ChannelOpen()),
    )))
    assert [e.channel for e in events if isinstance(e, ChannelOpenRequested)] == [65535, 2048, 3]
    assert conn.channels.open_channels == {65535, 3}
    events = conn.receive_data(encode_method_frame(4, m.ChannelOpen()))
    assert [(e.reply_code, e.reply_text) for e in events if isinstance(e, ConnectionClosed)] == [
        (530, "NOT_ALLOWED - number of channels opened (2) has reached the negotiated channel_max (2)")]
    close = m.decode_method(last_method_payload(conn.data_to_send()))
    assert (close.reply_code, close.class_id, close.method_id) == (530, 0, 0)


def test_channel_open_waits_for_the_session_before_open_ok():
    """channel.open is a request: open-ok goes out only on accept_channel, after anything already
    queued, and before the replies to what the peer pipelined behind it."""
    conn = new_conn()
    conn.receive_data(open_bytes())
    conn.data_to_send()
    events = conn.receive_data(method(1, m.ChannelOpen()) + method(1, m.BasicQos(prefetch_count=1)))
    assert [describe(e) for e in events] == [("opened", 1), ("method", 1, "basic.qos")]
    assert conn.data_to_send() == b"" and conn.is_channel_open(1)
    conn.accept_channel(1)
    conn.send_method(1, m.BasicQosOk())
    assert [(ch, meth.NAME) for ch, meth in sent_methods(conn)] == [(1, "channel.open-ok"), (1, "basic.qos-ok")]


def test_a_refused_channel_open_gets_connection_close_and_no_open_ok():
    """The session refuses (a user's max-channels) by closing the connection: 530, failed method
    none, as RabbitMQ; a late accept_channel sends nothing."""
    conn = new_conn()
    conn.receive_data(open_bytes())
    conn.data_to_send()
    events = conn.receive_data(method(2, m.ChannelOpen()) + method(2, m.BasicQos()))
    assert [describe(e) for e in events] == [("opened", 2), ("method", 2, "basic.qos")]
    text = "NOT_ALLOWED - number of channels opened for user 'u' has reached the maximum allowed user limit of (1)"
    conn.close(reply_code=530, reply_text=text)
    conn.accept_channel(2)
    sent = sent_methods(conn)
    assert [(ch, meth.NAME) for ch, meth in sent] == [(0, "connection.close")]
    close = sent[0][1]
    assert (close.reply_code, close.reply_text, close.class_id, close.method_id) == (530, text, 0, 0)
    assert conn.receive_data(method(0, m.ConnectionCloseOk())) == [ConnectionCloseOk()]


def test_second_channel_open_is_refused_by_the_protocol_with_rabbitmqs_text():
    conn = new_conn()
    accept_opens(conn, conn.receive_data(handshake_bytes()))
    conn.data_to_send()
    events = conn.receive_data(method(1, m.ChannelOpen()))
    assert [describe(e) for e in events] == [("closed", 504, False)]
    close = m.decode_method(last_method_payload(conn.data_to_send()))
    assert (close.reply_code, close.reply_text, close.class_id, close.method_id) == (
        504, "CHANNEL_ERROR - second 'channel.open' seen", 20, 10)


def test_oversized_content_closes_only_the_channel():
    conn = new_conn(max_message_size=10)
    events = conn.receive_data(handshake_bytes() + publish_bytes(b"x" * 11))
    assert any(isinstance(e, ChannelClosed) and e.reply_code == 406 for e in events)
    assert conn.state is ConnectionState.OPEN and 1 in conn.channels.closing_channels


def test_bad_protocol_header_answers_ours():
    conn = new_conn()
    assert conn.receive_data(b"HTTP/1.1") == [BadProtocolHeader()]
    assert conn.data_to_send() == HEADER


def test_out_of_order_handshake_is_command_invalid():
    conn = new_conn()
    events = conn.receive_data(HEADER + encode_method_frame(0, m.ConnectionOpen("/")))
    assert [e.reply_code for e in events if isinstance(e, ConnectionClosed)] == [503]
