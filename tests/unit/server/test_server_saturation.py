"""Delivery's share of the loop, through real sessions on one broker: a publisher whose batch
saturated a consumer-backed queue is paused until the queue drains or its consumers stall; a queue
without consumers never pauses anyone."""

from __future__ import annotations

import struct

from headrace.server.amqp import methods as m
from headrace.server.amqp.codec import encode_frame, encode_method_frame
from headrace.server.amqp.connection import AMQPConnection
from headrace.server.broker import Broker
from headrace.server.broker.saturation import SATURATED_READY, STALLED_TICKS
from headrace.server.session import Session
from session_support import NOW, handshake
from shell_ports import StandInShell, no_writer


def open_session(broker: Broker) -> tuple[Session, AMQPConnection]:
    conn = AMQPConnection(server_properties={})
    session = Session(broker, conn, wake=no_writer)
    session.handle(conn.receive_data(handshake()), NOW)
    conn.data_to_send()
    return session, conn


def publishes(queue: str, count: int) -> bytes:
    one = (encode_method_frame(1, m.BasicPublish(exchange="", routing_key=queue))
           + encode_frame(2, 1, struct.pack(">HHQ", 60, 0, 1) + b"\x00\x00") + encode_frame(3, 1, b"x"))
    return one * count


def setup(shell: StandInShell | None = None) -> tuple[Broker, Session, AMQPConnection, Session, AMQPConnection]:
    b = Broker(ports=(shell or StandInShell()).ports())
    b.ensure_default("/", "guest", "guest")
    for name in ("fed", "backlog"):
        b.vhosts["/"].declare_queue(name, now=NOW, owner=None)
    publisher, pconn = open_session(b)
    consumer, cconn = open_session(b)
    consumer.handle(cconn.receive_data(encode_method_frame(1, m.BasicQos(prefetch_count=10))
                                       + encode_method_frame(1, m.BasicConsume(queue="fed", consumer_tag="c"))), NOW)
    cconn.data_to_send()
    return b, publisher, pconn, consumer, cconn


def test_queue_without_consumers_never_pauses_its_publisher():
    b, publisher, pconn, _, _ = setup()
    publisher.handle(pconn.receive_data(publishes("backlog", SATURATED_READY * 3)), NOW)
    assert b.vhosts["/"].queues["backlog"].messages_ready == SATURATED_READY * 3
    assert not publisher.read_paused


def test_saturated_queue_pauses_its_publisher_until_it_drains():
    shell = StandInShell()
    b, publisher, pconn, consumer, cconn = setup(shell)
    other, oconn = open_session(b)
    publisher.handle(pconn.receive_data(publishes("fed", SATURATED_READY // 2)), NOW)
    assert not publisher.read_paused  # below the bound (the consumer holds 10 of them)
    publisher.handle(pconn.receive_data(publishes("fed", SATURATED_READY)), NOW)
    assert b.vhosts["/"].queues["fed"].messages_ready == SATURATED_READY // 2 + SATURATED_READY - 10
    assert publisher.read_paused
    other.handle(oconn.receive_data(publishes("backlog", 10)), NOW)
    assert not other.read_paused  # it published elsewhere
    released = shell.released  # the queues the broker told the shell's gate it released
    b.tick(NOW + 0.1)  # delivered since it was marked: still saturated
    assert publisher.read_paused and not released
    # the consumer takes everything (no prefetch limit): consumer_ready dispatches and releases
    consumer.handle(cconn.receive_data(encode_method_frame(1, m.BasicQos(prefetch_count=0))), NOW)
    assert b.vhosts["/"].queues["fed"].messages_ready == 0
    assert released == [b.vhosts["/"].queues["fed"]] and not publisher.read_paused


def test_stalled_consumers_release_their_publishers_and_leave_the_queue_exempt():
    b, publisher, pconn, _, _ = setup()
    publisher.handle(pconn.receive_data(publishes("fed", SATURATED_READY * 2)), NOW)
    assert publisher.read_paused
    for i in range(STALLED_TICKS - 1):
        b.tick(NOW + 0.1 * (i + 1))
    assert publisher.read_paused  # the consumer took ten, then nothing: not stalled yet
    b.tick(NOW + 0.1 * STALLED_TICKS)
    assert not publisher.read_paused
    publisher.handle(pconn.receive_data(publishes("fed", SATURATED_READY)), NOW + 1.1)
    assert not publisher.read_paused  # a backlog now, until it drains


def test_configured_bounds_hold_and_release():
    """``saturation_ready`` / ``saturation_resume_ready`` land in ``high`` / ``low``."""
    b, publisher, pconn, consumer, cconn = setup()
    b.delivery.saturation.high, b.delivery.saturation.low = 50, 20
    publisher.handle(pconn.receive_data(publishes("fed", 59)), NOW)  # the consumer holds 10
    assert b.vhosts["/"].queues["fed"].messages_ready == 49
    assert not publisher.read_paused
    publisher.handle(pconn.receive_data(publishes("fed", 1)), NOW)
    assert publisher.read_paused
    consumer.handle(cconn.receive_data(encode_method_frame(1, m.BasicQos(prefetch_count=40))), NOW)
    assert b.vhosts["/"].queues["fed"].messages_ready == 20  # 30 more taken: down to the low bound
    assert not publisher.read_paused
