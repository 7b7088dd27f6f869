"""The sans-IO codec: every method against pika's (the reference client's generated codec), how
fields are declared, tables, properties, deliver frames, SASL responses."""

from __future__ import annotations

import struct
from dataclasses import dataclass

import pika.spec
import pytest

from headrace.server.amqp import methods as m
from headrace.server.amqp.codec import decode_ack, decode_publish, encode_deliver
from headrace.server.amqp.fields import Bit, ShortStr
from headrace.server.amqp.method_codec import Method, amqp_method
from headrace.server.amqp.properties import (
    BasicProperties,
    decode_properties,
    encode_properties,
    quick_props,
    replace_headers,
)
from headrace.server.amqp.sasl import parse_response
from headrace.server.amqp.tables import decode_table, encode_table

SAMPLES = [
    m.QueueDeclare(queue="q", durable=True, arguments={"x-max-length": 5, "nested": {"a": [1, "b"]}}),
    m.ExchangeDeclare(exchange="x", type="topic", auto_delete=True, internal=True,
                      arguments={"alternate-exchange": "ae"}),
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


# a value of each kind that no default has, so a field read from the wrong place shows
VALUES = {"octet": 7, "short": 300, "long": 70000, "longlong": 1 << 40, "timestamp": 5, "shortstr": "s-é",
          "longstr": b"long\x00", "table": {"k": 1, "n": {"a": [True]}}}
PIKA_NAMES = {"global_": "global_qos"}


@pytest.mark.parametrize("cls", list(m.METHODS.values()), ids=lambda c: c.NAME)
def test_every_method_matches_pikas_ids_field_order_and_kinds(cls):
    """Every field set (bits alternating) and decoded by pika's generated codec; pika's encoding
    decodes back to the same method here."""
    values = {name: (i % 2 == 0) if kind == "bit" else VALUES[kind] for i, (name, kind) in enumerate(cls.FIELDS)}
    method = cls(**values)
    payload = m.encode_method(method)
    assert struct.unpack_from(">HH", payload) == (cls.CLASS_ID, cls.METHOD_ID)
    pika_cls = pika.spec.methods[(cls.CLASS_ID << 16) | cls.METHOD_ID]
    assert pika_cls.NAME.lower() == cls.NAME.replace("-", "")
    decoded = pika_cls.__new__(pika_cls).decode(payload, 4)
    if cls is m.ConnectionUpdateSecret:
        return  # pika 1.3 decodes update-secret's new-secret into an attribute named "mechanisms"
    for name, kind in cls.FIELDS:
        value = getattr(decoded, PIKA_NAMES.get(name, name))
        assert (value.encode() if kind == "longstr" and isinstance(value, str) else value) == values[name], name
    assert m.decode_method(payload[:4] + b"".join(decoded.encode())) == method


def test_fields_are_declared_once_with_their_kind():
    assert m.BasicPublish.FIELDS == (("ticket", "short"), ("exchange", "shortstr"), ("routing_key", "shortstr"),
                                     ("mandatory", "bit"), ("immediate", "bit"))
    with pytest.raises(TypeError, match="field kind"):
        @amqp_method(200, 1, "test.unannotated")
        @dataclass(frozen=True, slots=True)
        class Unannotated(Method):
            name: str = ""
    with pytest.raises(TypeError, match="already taken"):
        @amqp_method(60, 40, "test.duplicate")
        @dataclass(frozen=True, slots=True)
        class Duplicate(Method):
            name: ShortStr = ""
    assert (200, 1) not in m.METHODS and m.METHODS[(60, 40)] is m.BasicPublish


def test_nine_consecutive_bits_take_two_octets_low_bit_first():
    @amqp_method(201, 1, "test.nine-bits")
    @dataclass(frozen=True, slots=True)
    class NineBits(Method):
        b0: Bit = False
        b1: Bit = False
        b2: Bit = False
        b3: Bit = False
        b4: Bit = False
        b5: Bit = False
        b6: Bit = False
        b7: Bit = False
        b8: Bit = False
        tail: ShortStr = ""

    try:
        method = NineBits(b0=True, b7=True, b8=True, tail="t")
        payload = m.encode_method(method)
        assert payload == b"\x00\xc9\x00\x01\x81\x01\x01t"
        assert m.decode_method(payload) == method
    finally:
        del m.METHODS[(201, 1)]


def test_hand_written_fast_paths_agree_with_the_generic_codec():
    publish = m.BasicPublish(exchange="ex", routing_key="rk", mandatory=True, immediate=False)
    assert decode_publish(m.encode_method(publish)) == publish
    for ack in (m.BasicAck(1 << 50, True), m.BasicAck(3, False)):
        assert decode_ack(m.encode_method(ack)) == ack
    deliver = m.BasicDeliver(consumer_tag="ct", delivery_tag=9, redelivered=True, exchange="e", routing_key="r")
    frame = encode_deliver(2, "ct", 9, True, "e", "r", b"\x00\x00", b"body", 4096)
    assert m.decode_method(frame[7:7 + struct.unpack_from(">I", frame, 3)[0]]) == deliver


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


def test_sasl_plain_and_amqplain():
    assert parse_response("PLAIN", b"\x00guest\x00secret") == ("guest", "secret")
    amqplain = encode_table({"LOGIN": "u", "PASSWORD": "p"})[4:]
    assert parse_response("AMQPLAIN", amqplain) == ("u", "p")
