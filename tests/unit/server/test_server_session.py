"""Session behaviour without sockets: the protocol core and the broker driven by bytes."""

from __future__ import annotations

import struct

from headrace.server.amqp import methods as m
from headrace.server.amqp.codec import encode_frame, encode_method_frame
from headrace.server.amqp.connection import AMQPConnection
from headrace.server.amqp.properties import BasicProperties, encode_properties
from headrace.server.broker import Broker
from headrace.server.session import Session


def open_session(broker: Broker, **kw) -> tuple[Session, AMQPConnection]:
    conn = AMQPConnection(server_properties={})
    session = Session(broker, conn, **kw)
    caps = {"capabilities": {"connection.blocked": True, "consumer_cancel_notify": True}}
    session.handle(conn.receive_data(
        b"AMQP\x00\x00\x09\x01"
        + encode_method_frame(0, m.ConnectionStartOk(caps, "PLAIN", b"\x00guest\x00guest", "en_US"))
        + encode_method_frame(0, m.ConnectionTuneOk(0, 131072, 0))
        + encode_method_frame(0, m.ConnectionOpen("/"))
        + encode_method_frame(1, m.ChannelOpen())))
    conn.data_to_send()
    return session, conn


def publish(queue: str, persistent: bool = True) -> bytes:
    props = encode_properties(BasicProperties(delivery_mode=2 if persistent else 1))
    return (encode_method_frame(1, m.BasicPublish(exchange="", routing_key=queue))
            + encode_frame(2, 1, struct.pack(">HHQ", 60, 0, 1) + props) + encode_frame(3, 1, b"x"))


def frames(data: bytes) -> list[tuple[int, int]]:
    out, pos = [], 0
    while pos < len(data):
        ftype, _, size = struct.unpack_from(">BHI", data, pos)
        if ftype == 1:
            out.append(struct.unpack_from(">HH", data, pos + 7))
        pos += 8 + size
    return out


def broker() -> Broker:
    b = Broker(store_enabled=True)
    b.ensure_default("/", "guest", "guest")
    b.vhosts["/"].declare_queue("d", owner=None, durable=True)
    return b


def test_confirms_wait_for_the_store_and_go_out_as_one_multiple_ack():
    b = broker()
    session, conn = open_session(b, max_unconfirmed=3)
    session.handle(conn.receive_data(encode_method_frame(1, m.ConfirmSelect())))
    conn.data_to_send()
    session.handle(conn.receive_data(publish("d") * 3))
    assert frames(conn.data_to_send()) == []  # nothing confirmed before the fsync
    assert session.unconfirmed == 3 and session.read_paused  # the per-connection bound is reached
    ops, ticket = b.take_store_ops()
    assert len(ops) == 3
    b.store_synced(ticket)
    data = conn.data_to_send()
    assert frames(data) == [(60, 80)]  # one basic.ack ...
    assert data[-2] & 1  # ... with multiple=True
    assert not session.read_paused


def test_blocked_then_unblocked_for_a_publishing_connection():
    b = broker()
    session, conn = open_session(b)
    b.set_alarm("memory", True)
    assert frames(conn.data_to_send()) == []  # not publishing yet: not blocked (RabbitMQ's rule)
    session.handle(conn.receive_data(publish("d", persistent=False)))
    assert (10, 60) in frames(conn.data_to_send()) and session.read_paused
    b.set_alarm("memory", False)
    assert frames(conn.data_to_send()) == [(10, 61)] and not session.read_paused


def test_closing_the_connection_requeues_and_drops_exclusive_queues():
    b = broker()
    session, conn = open_session(b)
    session.handle(conn.receive_data(
        encode_method_frame(1, m.QueueDeclare(queue="mine", exclusive=True)) + publish("d")
        + encode_method_frame(1, m.BasicGet(queue="d"))))
    assert b.vhosts["/"].queues["d"].messages_unacked == 1
    session.connection_lost()
    assert "mine" not in b.vhosts["/"].queues
    assert b.vhosts["/"].queues["d"].messages_ready == 1
