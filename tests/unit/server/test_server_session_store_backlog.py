"""A publishing connection stops being read while the store outbox is full, and reads again once
the flusher has taken a batch: the outbox (which keeps each Publish's body alive after the queue
spilled the message) stays bounded even for publishers without confirms."""

from __future__ import annotations

import struct

from headrace.server.amqp import methods as m
from headrace.server.amqp.codec import encode_frame, encode_method_frame
from headrace.server.amqp.connection import AMQPConnection
from headrace.server.amqp.properties import BasicProperties, encode_properties
from headrace.server.broker import Broker
from headrace.server.broker.core import STORE_BACKLOG_MAX
from headrace.server.session import Session
from session_support import durable_broker, handshake
from shell_ports import no_writer, shell_ports

NOW = 1000.0  # the broker time the calls below pass


def open_session(broker: Broker) -> tuple[Session, AMQPConnection]:
    conn = AMQPConnection(server_properties={})
    session = Session(broker, conn, wake=no_writer)
    session.handle(conn.receive_data(handshake()), NOW)
    conn.data_to_send()
    return session, conn


def publish(persistent: bool = True) -> bytes:
    props = encode_properties(BasicProperties(delivery_mode=2 if persistent else 1))
    return (encode_method_frame(1, m.BasicPublish(exchange="", routing_key="d"))
            + encode_frame(2, 1, struct.pack(">HHQ", 60, 0, 1) + props) + encode_frame(3, 1, b"x"))


def test_store_backlog_pauses_publishers_until_the_flusher_takes_a_batch():
    b = durable_broker(4)
    publisher, pconn = open_session(b)
    other, _ = open_session(b)  # has not published: never paused for the backlog
    publisher.handle(pconn.receive_data(publish() * 3), NOW)
    assert b.store_backlog == 3 and not publisher.read_paused
    publisher.handle(pconn.receive_data(publish()), NOW)
    assert b.store_backlog == 4
    assert publisher.read_paused and not other.read_paused
    ops, ticket = b.take_store_ops(2)  # one flusher batch
    assert len(ops) == 2 and not publisher.read_paused
    b.store_synced(ticket)
    assert not publisher.read_paused


def test_transient_publishes_add_no_store_ops_so_never_pause():
    b = durable_broker(1)
    session, conn = open_session(b)
    session.handle(conn.receive_data(publish(persistent=False) * 5), NOW)
    assert b.store_backlog == 0 and not session.read_paused


def test_default_bound():
    assert Broker(ports=shell_ports(), store_enabled=True).store_backlog_max == STORE_BACKLOG_MAX == 50_000
