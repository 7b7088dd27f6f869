"""A connection's lifecycle as the session keeps it: HANDSHAKE -> OPEN -> CLOSING -> CLOSED, forward
only, and the connection's broker state dropped exactly once when it stops being live. Real
Session, AMQPConnection and Broker driven by bytes."""

from __future__ import annotations

import pytest
from headrace.server.amqp import methods as m
from headrace.server.amqp.codec import encode_method_frame
from headrace.server.amqp.connection import AMQPConnection
from headrace.server.amqp.errors import ConnectionException
from headrace.server.amqp.spec import ReplyCode
from headrace.server.broker import Broker
from headrace.server.broker.limits import Limits
from headrace.server.session import Lifecycle, Session
from session_support import handshake
from shell_ports import no_writer, shell_ports

NOW = 1000.0


def make_broker() -> Broker:
    b = Broker(ports=shell_ports())
    b.ensure_default("/", "guest", "guest")
    return b


def test_handshake_opens_then_a_client_close_ends_it_and_drops_its_state():
    b = make_broker()
    conn = AMQPConnection(server_properties={})
    session = Session(b, conn, wake=no_writer)
    assert session.state is Lifecycle.HANDSHAKE and session.reading
    session.handle(conn.receive_data(handshake()), NOW)
    assert session.state is Lifecycle.OPEN and session.id in b.connections
    session.handle(conn.receive_data(encode_method_frame(1, m.QueueDeclare(queue="mine", exclusive=True))), NOW)
    assert "mine" in b.vhosts["/"].queues
    session.handle(conn.receive_data(encode_method_frame(0, m.ConnectionClose(200, "bye", 0, 0))), NOW)
    assert session.state is Lifecycle.CLOSED and session.closed and not session.reading
    assert "mine" not in b.vhosts["/"].queues and session.id not in b.connections


def test_server_close_waits_for_close_ok_and_never_goes_back():
    b = make_broker()
    conn = AMQPConnection(server_properties={})
    session = Session(b, conn, wake=no_writer)
    session.handle(conn.receive_data(handshake()), NOW)
    session.close(ConnectionException(ReplyCode.CONNECTION_FORCED, "CONNECTION_FORCED - test"))
    assert session.state is Lifecycle.CLOSING and not session.reading and not session.closed
    assert session.id not in b.connections  # dropped on leaving OPEN, not at the socket's end
    session.close(ConnectionException(ReplyCode.CONNECTION_FORCED, "CONNECTION_FORCED - again"))
    assert session.state is Lifecycle.CLOSING
    session.connection_lost(NOW)
    assert session.state is Lifecycle.CLOSED
    session.close(ConnectionException(ReplyCode.CONNECTION_FORCED, "CONNECTION_FORCED - late"))
    assert session.state is Lifecycle.CLOSED


def test_a_refused_login_leaves_a_pipelined_open_unanswered():
    b = make_broker()
    conn = AMQPConnection(server_properties={})
    session = Session(b, conn, wake=no_writer)
    session.handle(conn.receive_data(handshake(password="wrong")), NOW)
    assert session.state is Lifecycle.CLOSING and session.vhost is None and not b.connections


def _consuming(timeout_ms: int | None) -> tuple[Broker, AMQPConnection, Session]:
    b = Broker(ports=shell_ports(), limits=Limits(consumer_timeout_ms=timeout_ms))
    b.ensure_default("/", "guest", "guest")
    conn = AMQPConnection(server_properties={})
    session = Session(b, conn, wake=no_writer)
    session.handle(conn.receive_data(handshake()), NOW)
    session.handle(conn.receive_data(encode_method_frame(1, m.QueueDeclare(queue="q"))
                                     + encode_method_frame(1, m.BasicConsume(queue="q", consumer_tag="c"))), NOW)
    conn.data_to_send()
    return b, conn, session


def test_a_busy_channel_keeps_one_consumer_timeout_stamp_a_grain_and_arms_one_deadline():
    b, conn, session = _consuming(60_000)
    channel = session.channels[1]
    vhost = b.vhosts["/"]
    for i in range(20_000):  # 200 s of deliveries, each acked: one stamp a second at most
        now = NOW + i / 100
        b.delivery.publish(vhost, "", "q", b"\x00\x00", b"m", now)
        session.handle(conn.receive_data(encode_method_frame(1, m.BasicAck(delivery_tag=0, multiple=True))), now)
        conn.data_to_send()
    assert channel.acks is not None and len(channel.acks.stamps) <= 201
    assert len(b.delivery.deadlines) == 1  # the session's, armed once
    b.tick(NOW + 62)  # due: nothing unacked, so the stamps go and nothing is armed again
    assert session.channels[1] is channel and not channel.acks.stamps and len(b.delivery.deadlines) == 0


def test_without_a_consumer_timeout_a_channel_keeps_no_stamps_and_arms_nothing():
    b, conn, session = _consuming(None)
    vhost = b.vhosts["/"]
    b.delivery.publish(vhost, "", "q", b"\x00\x00", b"m", NOW)
    assert session.channels[1].acks is None and len(b.delivery.deadlines) == 0


def test_an_unacked_delivery_times_its_channel_out_once_due_and_not_before():
    b, conn, session = _consuming(10_000)
    vhost = b.vhosts["/"]
    b.delivery.publish(vhost, "", "q", b"\x00\x00", b"held", NOW)
    b.delivery.publish(vhost, "", "q", b"\x00\x00", b"acked", NOW + 5)
    session.handle(conn.receive_data(encode_method_frame(1, m.BasicAck(delivery_tag=2))), NOW + 5)
    conn.data_to_send()
    assert b.next_deadline() == pytest.approx(NOW + 11)  # the stamp, a grain (1 s), the timeout
    b.tick(NOW + 10.5)
    assert 1 in session.channels
    b.tick(NOW + 11)
    assert 1 not in session.channels
    assert b"delivery acknowledgement on channel 1 timed out. Timeout value used: 10000 ms" in conn.data_to_send()
    queue = vhost.queues["q"]
    assert queue.messages_ready == 1  # back in its queue
    assert len(b.delivery.deadlines) == 0


def test_a_lost_connection_disarms_its_consumer_timeout():
    b, conn, session = _consuming(10_000)
    b.delivery.publish(b.vhosts["/"], "", "q", b"\x00\x00", b"held", NOW)
    assert len(b.delivery.deadlines) == 1
    session.connection_lost(NOW + 1)
    assert len(b.delivery.deadlines) == 0


def test_an_empty_virtual_host_opens_the_default_one_and_an_unknown_one_is_530():
    """Bunny reads ``amqp://host/`` as the virtual host "" (the AMQP URI spec); it is taken as "/"
    (docs/clients.md, "Use it from your client"). A vhost that does not exist is 530, as in RabbitMQ."""
    b = make_broker()
    conn = AMQPConnection(server_properties={})
    session = Session(b, conn, wake=no_writer)
    session.handle(conn.receive_data(handshake(vhost="")), NOW)
    assert session.state is Lifecycle.OPEN and session.vhost is b.vhosts["/"]
    conn = AMQPConnection(server_properties={})
    session = Session(b, conn, wake=no_writer)
    session.handle(conn.receive_data(handshake(vhost="nope")), NOW)
    assert session.state is Lifecycle.CLOSING and b"NOT_ALLOWED - vhost nope not found" in conn.data_to_send()


def test_a_multiple_ack_across_gaps_takes_what_is_unacked_up_to_its_tag_and_nothing_twice():
    """The channel's unacked table is a plain dict found from its oldest tag up (channel.py)."""
    b, conn, session = _consuming(None)
    vhost = b.vhosts["/"]
    channel = session.channels[1]
    for i in range(6):
        b.delivery.publish(vhost, "", "q", b"\x00\x00", b"m%d" % i, NOW)
    session.handle(conn.receive_data(encode_method_frame(1, m.BasicAck(delivery_tag=3))), NOW)
    assert channel.oldest_unacked() == 1
    session.handle(conn.receive_data(encode_method_frame(1, m.BasicAck(delivery_tag=5, multiple=True))), NOW)
    assert list(channel.unacked) == [6] and channel.oldest_unacked() == 6
    assert [entry.message.body for _, entry in channel.unacked.values()] == [b"m5"]
    conn.data_to_send()
    session.handle(conn.receive_data(encode_method_frame(1, m.BasicAck(delivery_tag=4, multiple=True))), NOW)
    assert b"unknown delivery tag 4" in conn.data_to_send()
