"""The firehose without a network: a real Broker and Session fed AMQP bytes, the copies taken from
a queue bound to amq.rabbitmq.trace (a session publishes them once its batch is dispatched,
``Broker.tick`` those made outside a session)."""

from __future__ import annotations

import struct

from session_support import NOW, handshake

from headrace.exchanges import DestinationKind
from headrace.server.amqp import methods as m
from headrace.server.amqp.codec import encode_frame, encode_method_frame
from headrace.server.amqp.connection import AMQPConnection
from headrace.server.broker import Broker
from headrace.server.session import Session
from shell_ports import no_writer, shell_ports


def publish(routing_key: str, body: bytes, expiration: bytes | None = None) -> bytes:
    props = b"\x00\x00" if expiration is None else b"\x01\x00" + bytes([len(expiration)]) + expiration
    return (encode_method_frame(1, m.BasicPublish(exchange="", routing_key=routing_key))
            + encode_frame(2, 1, struct.pack(">HHQ", 60, 0, len(body)) + props)
            + encode_frame(3, 1, body))


def traced_broker() -> tuple[Broker, Session, AMQPConnection]:
    broker = Broker(ports=shell_ports())
    broker.ensure_default("/", "guest", "guest")
    vhost = broker.vhosts["/"]
    vhost.declare_queue("q", now=NOW, owner=None)
    vhost.declare_queue("trace", now=NOW, owner=None)
    vhost.bind("amq.rabbitmq.trace", "trace", DestinationKind.QUEUE, "#", None)
    vhost.tracing = True
    conn = AMQPConnection(server_properties={})
    session = Session(broker, conn, wake=no_writer, peer=("127.0.0.1", 40000), local=("127.0.0.1", 5672))
    session.handle(conn.receive_data(handshake()), NOW)
    conn.data_to_send()
    return broker, session, conn


def copies(broker: Broker) -> list[tuple[str, bytes, dict]]:
    vhost = broker.vhosts["/"]
    out = []
    while (entry := broker.delivery.get(vhost, vhost.queues["trace"], NOW, no_ack=True, owner=None)) is not None:
        out.append((entry.message.routing_key, entry.message.body, dict(entry.message.headers or {})))
    return out


def test_a_run_of_publishes_is_copied_one_by_one_in_order_within_the_same_read() -> None:
    broker, session, conn = traced_broker()
    session.handle(conn.receive_data(b"".join(publish("q", b"m%d" % i) for i in range(5))), NOW)
    assert broker.firehose.pending == []  # published at the end of the batch, not by the clock
    got = copies(broker)
    assert [(key, body) for key, body, _ in got] == [("publish.", b"m%d" % i) for i in range(5)]
    assert got[0][2]["routed_queues"] == ["q"] and got[0][2]["connection"] == "127.0.0.1:40000 -> 127.0.0.1:5672"
    assert broker.next_deadline() is None


def test_a_delivery_is_copied_and_the_copies_of_a_vhost_switched_off_or_gone_are_dropped() -> None:
    broker, session, conn = traced_broker()
    session.handle(conn.receive_data(publish("q", b"one") + encode_method_frame(1, m.BasicGet(queue="q", no_ack=True))),
                   NOW)
    assert [key for key, _, _ in copies(broker)] == ["publish.", "deliver.q"]
    vhost = broker.vhosts["/"]
    broker.firehose.published(vhost, "", "q", b"\x00\x00", b"two", None, "", 0, "guest")  # as an HTTP publish
    assert broker.next_deadline() == float("-inf")  # the clock is to look at once
    vhost.tracing = False  # before the clock published it
    broker.tick(NOW)
    assert copies(broker) == []
    broker.add_vhost("v").tracing = True
    broker.firehose.published(broker.vhosts["v"], "amq.direct", "k", b"\x00\x00", b"x", None, "", 0, "guest")
    assert broker.delete_vhost("v")
    broker.tick(NOW)  # its copy has nowhere to go: dropped, nothing raised
    assert broker.firehose.pending == []


def test_a_publish_the_broker_refuses_for_its_expiration_is_not_copied_alone_or_in_a_run() -> None:
    broker, session, conn = traced_broker()
    session.handle(conn.receive_data(publish("q", b"bad", expiration=b"soon")), NOW)
    assert b"invalid expiration" in conn.data_to_send()  # the channel is closed with 406
    assert copies(broker) == [] and broker.firehose.pending == []
    broker, session, conn = traced_broker()
    run = [publish("q", b"m0"), publish("q", b"m1", expiration=b"60000"), publish("q", b"m2", expiration=b"-1"),
           publish("q", b"m3")]
    session.handle(conn.receive_data(b"".join(run)), NOW)
    assert b"invalid expiration" in conn.data_to_send()
    assert [body for _, body, _ in copies(broker)] == [b"m0", b"m1"]  # those placed before it, in order
    assert broker.vhosts["/"].queues["q"].messages_ready == 2
