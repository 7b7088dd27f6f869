"""The sans-IO protocol core: method codec against pika's, tables, properties, the connection state
machine fed whole / byte by byte / with trailing data, and a fuzz invariant."""

from __future__ import annotations

import os
import struct

import pika.spec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from headrace.server.amqp import methods as m
from headrace.server.amqp.codec import encode_deliver, encode_frame, encode_method_frame
from headrace.server.amqp.connection import AMQPConnection, ConnectionState
from headrace.server.amqp.events import (
    BadProtocolHeader,
    ChannelClosed,
    ChannelOpened,
    ConnectionClosed,
    ContentReceived,
    MethodReceived,
)
from headrace.server.amqp.properties import (
    BasicProperties,
    decode_properties,
    encode_properties,
    quick_props,
    replace_headers,
)
from headrace.server.amqp.sasl import parse_response
from headrace.server.amqp.tables import decode_table, encode_table

HEADER = b"AMQP\x00\x00\x09\x01"
# `make fuzz` raises this for a long run; `make test` keeps the bounded default
FUZZ_EXAMPLES = int(os.environ.get("HEADRACE_FUZZ_EXAMPLES", "400"))

SAMPLES = [
    m.QueueDeclare(queue="q", durable=True, arguments={"x-max-length": 5, "nested": {"a": [1, "b"]}}),
    m.ExchangeDeclare(exchange="x", type="topic", auto_delete=True, internal=True, arguments={"alternate-exchange": "ae"}),
    m.BasicPublish(exchange="x", routing_key="a.b", mandatory=True),
    m.BasicConsume(queue="q", consumer_tag="t", no_ack=True, exclusive=True, arguments={"x-priority": 3}),
    m.BasicAck(delivery_tag=1 << 40, multiple=True),
    m.BasicNack(delivery_tag=7, multiple=False, requeue=False),
    m.BasicQos(prefetch_count=10, global_=True),
    m.QueueBind(queue="q", exchange="x", routing_key="k", arguments={"x-match": "any"}),
    m.ConnectionClose(reply_code=320, reply_text="CONNECTION_FORCED - bye", class_id=0, method_id=0),
    m.ExchangeBind(destination="d", source="s", routing_key="r"),
    m.QueueDelete(queue="q", if_unused=True, if_empty=True),
    m.ConfirmSelect(nowait=False),
]


@pytest.mark.parametrize("method", SAMPLES, ids=lambda x: x.NAME)
def test_method_round_trip_and_pika_agrees(method):
    payload = m.encode_method(method)
    assert m.decode_method(payload) == method
    pika_cls = pika.spec.methods[(method.CLASS_ID << 16) | method.METHOD_ID]
    decoded = pika_cls().decode(payload, 4)
    for name, _ in method.FIELDS:
        pika_name = {"global_": "global_qos", "type": "exchange_type"}.get(name, name)
        if hasattr(decoded, pika_name):
            assert getattr(decoded, pika_name) == getattr(method, name), name
    # and pika's encoding decodes back to the same method here
    assert m.decode_method(payload[:4] + b"".join(decoded.encode())) == method


def test_every_method_class_round_trips_with_defaults():
    for cls in m.METHODS.values():
        method = cls()
        assert m.decode_method(m.encode_method(method)) == method


def test_table_types_round_trip():
    table = {"s": "é", "i": -1, "l": 1 << 40, "t": False, "d": 2.5, "n": None, "x": b"\xff", "a": [1, [2], {"k": "v"}]}
    raw = encode_table(table)
    assert decode_table(raw, 0) == (table, len(raw))


def test_properties_round_trip_quick_peek_and_header_replacement():
    props = BasicProperties(content_type="t", headers={"a": 1}, delivery_mode=2, priority=4, correlation_id="c",
                            reply_to="r", expiration="1500", message_id="id", timestamp=5, app_id="app")
    raw = encode_properties(props)
    assert decode_properties(raw) == props
    assert quick_props(raw) == (2, 4, "1500", True)
    assert quick_props(encode_properties(BasicProperties())) == (None, None, None, False)
    replaced = replace_headers(raw, {"b": 2})
    assert decode_properties(replaced).headers == {"b": 2} and decode_properties(replaced).message_id == "id"
    pika_props = pika.spec.BasicProperties()
    pika_props.decode(raw)
    assert pika_props.headers == {"a": 1} and pika_props.expiration == "1500"


def test_deliver_encoding_is_what_pika_reads():
    data = encode_deliver(3, "ctag", 9, True, "ex", "rk", encode_properties(BasicProperties(message_id="m")),
                          b"x" * 10000, 4096)
    frames = []
    pos = 0
    while pos < len(data):
        ftype, channel, size = struct.unpack_from(">BHI", data, pos)
        frames.append((ftype, data[pos + 7:pos + 7 + size]))
        assert data[pos + 7 + size] == 0xCE and channel == 3
        pos += 8 + size
    assert [f[0] for f in frames] == [1, 2, 3, 3, 3]
    deliver = pika.spec.Basic.Deliver().decode(frames[0][1], 4)
    assert (deliver.consumer_tag, deliver.delivery_tag, deliver.redelivered, deliver.exchange,
            deliver.routing_key) == ("ctag", 9, True, "ex", "rk")
    assert b"".join(f[1] for f in frames[2:]) == b"x" * 10000


def new_conn(**kw) -> AMQPConnection:
    return AMQPConnection(server_properties={"product": "test"}, **kw)


def handshake_bytes(heartbeat: int = 0) -> bytes:
    return HEADER + b"".join((
        encode_method_frame(0, m.ConnectionStartOk({}, "PLAIN", b"\x00u\x00p", "en_US")),
        encode_method_frame(0, m.ConnectionTuneOk(100, 65536, heartbeat)),
        encode_method_frame(0, m.ConnectionOpen("/")),
        encode_method_frame(1, m.ChannelOpen()),
    ))


def publish_bytes(body: bytes, channel: int = 1) -> bytes:
    props = encode_properties(BasicProperties(delivery_mode=2))
    header = struct.pack(">HHQ", 60, 0, len(body)) + props
    out = encode_method_frame(channel, m.BasicPublish(exchange="x", routing_key="k")) + encode_frame(2, channel, header)
    for i in range(0, len(body), 1000):
        out += encode_frame(3, channel, body[i:i + 1000])
    return out


def feed(conn: AMQPConnection, data: bytes, mode: str) -> list:
    events = []
    if mode == "whole":
        events += conn.receive_data(data)
    elif mode == "bytewise":
        for i in range(len(data)):
            events += conn.receive_data(data[i:i + 1])
    else:  # in two uneven pieces
        events += conn.receive_data(data[:len(data) // 3])
        events += conn.receive_data(data[len(data) // 3:])
    return events


@pytest.mark.parametrize("mode", ["whole", "bytewise", "split"])
def test_handshake_then_publish_with_multi_frame_body(mode):
    conn = new_conn()
    body = bytes(range(256)) * 10
    events = feed(conn, handshake_bytes() + publish_bytes(body) + publish_bytes(b""), mode)
    kinds = [type(e) for e in events]
    assert kinds == [MethodReceived, MethodReceived, MethodReceived, ChannelOpened, ContentReceived, ContentReceived]
    assert conn.state is ConnectionState.OPEN and conn.frame_max == 65536 and conn.channel_max == 100
    assert events[4].body == body and events[5].body == b""
    assert quick_props(events[4].props_raw)[0] == 2
    out = conn.data_to_send()
    assert out.count(b"\x00\x14\x00\x0b") == 1  # channel.open-ok


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
    ],
)
def test_protocol_violations_close_the_connection_with_their_code(tail, code):
    conn = new_conn()
    events = conn.receive_data(handshake_bytes() + tail)
    closed = [e for e in events if isinstance(e, ConnectionClosed)]
    assert closed and closed[0].reply_code == code and not closed[0].by_peer
    assert conn.state is ConnectionState.CLOSING
    assert conn.receive_data(encode_method_frame(1, m.BasicQos())) == []  # ignored while closing


def publish_with_properties(props_raw: bytes, channel: int = 1) -> bytes:
    header = struct.pack(">HHQ", 60, 0, 1) + props_raw
    return (encode_method_frame(channel, m.BasicPublish(exchange="x", routing_key="k"))
            + encode_frame(2, channel, header) + encode_frame(3, channel, b"z"))


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


def last_method_payload(data: bytes) -> bytes:
    """Payload of the last frame in ``data`` (a method frame)."""
    pos = 0
    payload = b""
    while pos < len(data):
        _, _, size = struct.unpack_from(">BHI", data, pos)
        payload = data[pos + 7:pos + 7 + size]
        pos += 8 + size
    return payload


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
    assert [e.channel for e in events if isinstance(e, ChannelOpened)] == [65535, 2048, 3]
    assert conn.open_channels == {65535, 3}
    events = conn.receive_data(encode_method_frame(4, m.ChannelOpen()))
    assert [(e.reply_code, e.reply_text) for e in events if isinstance(e, ConnectionClosed)] == [
        (530, "NOT_ALLOWED - number of channels opened (2) has reached the negotiated channel_max (2)")]
    close = m.decode_method(last_method_payload(conn.data_to_send()))
    assert (close.reply_code, close.class_id, close.method_id) == (530, 0, 0)


def test_oversized_content_closes_only_the_channel():
    conn = new_conn(max_message_size=10)
    events = conn.receive_data(handshake_bytes() + publish_bytes(b"x" * 11))
    assert any(isinstance(e, ChannelClosed) and e.reply_code == 406 for e in events)
    assert conn.state is ConnectionState.OPEN and 1 in conn.closing_channels


def test_bad_protocol_header_answers_ours():
    conn = new_conn()
    assert conn.receive_data(b"HTTP/1.1") == [BadProtocolHeader()]
    assert conn.data_to_send() == HEADER


def test_out_of_order_handshake_is_command_invalid():
    conn = new_conn()
    events = conn.receive_data(HEADER + encode_method_frame(0, m.ConnectionOpen("/")))
    assert [e.reply_code for e in events if isinstance(e, ConnectionClosed)] == [503]


def test_heartbeat_tick_detects_silence():
    conn = new_conn()
    conn.receive_data(handshake_bytes(heartbeat=2))
    conn.data_to_send()
    assert conn.tick(0.0)
    assert conn.tick(1.0) and conn.data_to_send() == b"\x08\x00\x00\x00\x00\x00\x00\xce"
    assert conn.tick(4.0)
    assert not conn.tick(4.5)


def test_sasl_plain_and_amqplain():
    assert parse_response("PLAIN", b"\x00guest\x00secret") == ("guest", "secret")
    amqplain = encode_table({"LOGIN": "u", "PASSWORD": "p"})[4:]
    assert parse_response("AMQPLAIN", amqplain) == ("u", "p")


@settings(max_examples=FUZZ_EXAMPLES, deadline=None)
@given(st.binary(max_size=400), st.integers(min_value=1, max_value=64))
def test_fuzz_any_bytes_after_handshake_never_raise(garbage, chunk):
    conn = new_conn()
    conn.receive_data(handshake_bytes())
    for i in range(0, len(garbage), chunk):
        events = conn.receive_data(garbage[i:i + chunk])
        assert isinstance(events, list)
    conn.data_to_send()


@settings(max_examples=FUZZ_EXAMPLES // 2, deadline=None)
@given(st.binary(max_size=200))
def test_fuzz_any_bytes_from_the_start_never_raise(data):
    conn = new_conn()
    conn.receive_data(data)
    conn.data_to_send()


frames = st.one_of(
    st.builds(lambda ch, body: encode_frame(3, ch, body), st.integers(0, 3), st.binary(max_size=50)),
    st.builds(lambda ch, payload: encode_frame(1, ch, payload), st.integers(0, 3),
              st.sampled_from([m.encode_method(x) for x in SAMPLES]).flatmap(
                  lambda p: st.integers(0, len(p)).map(lambda n: p[:n]))),
    st.builds(lambda ch: encode_method_frame(ch, m.ChannelOpen()), st.integers(1, 3)),
    st.builds(lambda ch: encode_method_frame(ch, m.ChannelClose()), st.integers(0, 3)),
    st.builds(lambda ch, size: encode_frame(2, ch, struct.pack(">HHQ", 60, 0, size) + b"\x00\x00"),
              st.integers(0, 3), st.integers(0, 100)),
)


@settings(max_examples=FUZZ_EXAMPLES, deadline=None)
@given(st.lists(frames, max_size=12))
def test_fuzz_well_framed_but_wrong_sequences_never_raise(sequence):
    """Structure-aware: valid frames in arbitrary order exercise the state machine, not the framing."""
    conn = new_conn()
    conn.receive_data(handshake_bytes())
    for frame in sequence:
        assert isinstance(conn.receive_data(frame), list)
    conn.data_to_send()
