"""Session behaviour without sockets: the protocol core and the broker driven by bytes."""

from __future__ import annotations

import struct

from headrace.server.amqp import methods as m
from headrace.server.amqp.codec import encode_frame, encode_method_frame
from headrace.server.amqp.connection import AMQPConnection
from headrace.server.amqp.properties import BasicProperties, encode_properties
from headrace.server.broker import Broker
from headrace.server.session import Session
from session_support import handshake
from shell_ports import no_writer, shell_ports

NOW = 1000.0  # the broker time the calls below pass


def open_session(broker: Broker, **kw) -> tuple[Session, AMQPConnection]:
    conn = AMQPConnection(server_properties={})
    session = Session(broker, conn, wake=no_writer, **kw)
    caps = {"capabilities": {"connection.blocked": True, "consumer_cancel_notify": True}}
    session.handle(conn.receive_data(handshake(capabilities=caps)), NOW)
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
    b = Broker(ports=shell_ports(), store_enabled=True)
    b.ensure_default("/", "guest", "guest")
    b.vhosts["/"].declare_queue("d", now=NOW, owner=None, durable=True)
    return b


def test_confirms_wait_for_the_store_and_go_out_as_one_multiple_ack():
    b = broker()
    session, conn = open_session(b, max_unconfirmed=3)
    session.handle(conn.receive_data(encode_method_frame(1, m.ConfirmSelect())), NOW)
    conn.data_to_send()
    session.handle(conn.receive_data(publish("d") * 3), NOW)
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
    session.handle(conn.receive_data(publish("d", persistent=False)), NOW)
    assert (10, 60) in frames(conn.data_to_send()) and session.read_paused
    b.set_alarm("memory", False)
    assert frames(conn.data_to_send()) == [(10, 61)] and not session.read_paused


def test_closing_the_connection_requeues_and_drops_exclusive_queues():
    b = broker()
    session, conn = open_session(b)
    session.handle(conn.receive_data(
        encode_method_frame(1, m.QueueDeclare(queue="mine", exclusive=True)) + publish("d")
        + encode_method_frame(1, m.BasicGet(queue="d"))), NOW)
    assert b.vhosts["/"].queues["d"].messages_unacked == 1
    session.connection_lost(NOW)
    assert "mine" not in b.vhosts["/"].queues
    assert b.vhosts["/"].queues["d"].messages_ready == 1


# ---------------------------------------------------------------------- AMQP core semantics

def method(channel: int, meth) -> bytes:
    return encode_method_frame(channel, meth)


def closes(data: bytes) -> list[tuple[int, int, int]]:
    """(channel, class, reply code) of every channel.close / connection.close sent."""
    out, pos = [], 0
    while pos < len(data):
        ftype, channel, size = struct.unpack_from(">BHI", data, pos)
        if ftype == 1:
            cls, meth = struct.unpack_from(">HH", data, pos + 7)
            if (cls, meth) in ((20, 40), (10, 50)):
                out.append((channel, cls, struct.unpack_from(">H", data, pos + 11)[0]))
        pos += 8 + size
    return out


def test_alarm_change_keeps_a_commit_waiting_for_the_store():
    b = broker()
    session, conn = open_session(b)
    session.handle(conn.receive_data(method(1, m.TxSelect())), NOW)
    conn.data_to_send()
    session.handle(conn.receive_data(publish("d") + method(1, m.TxCommit())), NOW)
    assert (90, 21) not in frames(conn.data_to_send())  # commit-ok waits for the fsync
    b.set_alarm("memory", True)  # an alarm changes while the commit waits
    b.set_alarm("memory", False)
    _, ticket = b.take_store_ops()
    b.store_synced(ticket)
    assert (90, 21) in frames(conn.data_to_send())


def test_reject_and_nack_in_a_transaction_wait_for_commit_and_rollback_drops_them():
    b = broker()
    q = b.vhosts["/"].declare_queue("t", now=NOW, owner=None)
    session, conn = open_session(b)
    session.handle(conn.receive_data(publish("t", persistent=False) * 2
                                     + method(1, m.BasicGet(queue="t")) * 2 + method(1, m.TxSelect())), NOW)
    assert q.messages_unacked == 2
    settle = (method(1, m.BasicReject(delivery_tag=1, requeue=False))
              + method(1, m.BasicNack(delivery_tag=2, multiple=False, requeue=True)))
    session.handle(conn.receive_data(settle), NOW)
    assert q.messages_unacked == 2 and q.messages_ready == 0  # nothing settled before commit
    session.handle(conn.receive_data(method(1, m.TxRollback())), NOW)
    assert q.messages_unacked == 2  # rolled back: still held by the channel
    conn.data_to_send()
    session.handle(conn.receive_data(settle + method(1, m.TxCommit())), NOW)
    assert (90, 21) in frames(conn.data_to_send())
    assert q.messages_unacked == 0 and q.messages_ready == 1  # rejected one gone, nacked one back
    session.handle(conn.receive_data(method(1, m.BasicReject(delivery_tag=9, requeue=False))), NOW)
    assert closes(conn.data_to_send()) == [(1, 20, 406)]  # unknown tag checked at once, as for ack


def test_redeclare_renews_the_x_expires_lease():
    b = broker()
    vhost = b.vhosts["/"]
    b.tick(100.0)
    vhost.declare_queue("lease", now=100.0, owner=None, arguments={"x-expires": 1000})
    b.tick(100.9)
    vhost.declare_queue("lease", now=100.9, owner=None, arguments={"x-expires": 1000})
    b.tick(101.5)
    assert "lease" in vhost.queues
    vhost.declare_queue("lease", now=101.5, owner=None, passive=True)
    b.tick(102.2)
    assert "lease" in vhost.queues  # passive declare renews it too (RabbitMQ's queue stat)
    b.tick(102.6)
    assert "lease" not in vhost.queues


def test_exclusive_queue_of_another_connection_or_other_exclusive_flag_is_405():
    b = broker()
    a, aconn = open_session(b)
    other, oconn = open_session(b)
    a.handle(aconn.receive_data(method(1, m.QueueDeclare(queue="mine", exclusive=True))
                                + method(1, m.QueueDeclare(queue="shared"))), NOW)
    aconn.data_to_send()
    attempts = [
        m.QueueDeclare(queue="mine"),
        m.QueueDeclare(queue="mine", exclusive=True),
        m.QueueDeclare(queue="mine", passive=True),
        m.QueueBind(queue="mine", exchange="amq.direct", routing_key="k"),
        m.QueueUnbind(queue="mine", exchange="amq.direct", routing_key="k"),
    ]
    for channel, attempt in enumerate(attempts, start=2):
        other.handle(oconn.receive_data(method(channel, m.ChannelOpen()) + method(channel, attempt)), NOW)
        assert closes(oconn.data_to_send()) == [(channel, 20, 405)], attempt
    # the owner itself: a redeclare with the other exclusive flag is locked too (strict check)
    a.handle(aconn.receive_data(method(2, m.ChannelOpen()) + method(2, m.QueueDeclare(queue="mine"))), NOW)
    assert closes(aconn.data_to_send()) == [(2, 20, 405)]
    a.handle(aconn.receive_data(method(3, m.ChannelOpen())
                                + method(3, m.QueueDeclare(queue="shared", exclusive=True))), NOW)
    assert closes(aconn.data_to_send()) == [(3, 20, 405)]
    a.handle(aconn.receive_data(method(4, m.ChannelOpen()) + method(4, m.QueueDeclare(queue="mine", exclusive=True))
                                + method(4, m.QueueUnbind(queue="mine", exchange="amq.direct", routing_key="k"))), NOW)
    assert closes(aconn.data_to_send()) == []


def test_redeclare_without_an_argument_the_queue_has_is_406():
    b = broker()
    b.vhosts["/"].declare_queue("ttl", now=NOW, owner=None, arguments={"x-message-ttl": 1000, "x-custom": 1})
    session, conn = open_session(b)
    session.handle(conn.receive_data(method(1, m.QueueDeclare(queue="ttl", arguments={"x-message-ttl": 1000}))), NOW)
    assert closes(conn.data_to_send()) == []  # an unknown x- argument left out is not compared
    session.handle(conn.receive_data(method(2, m.ChannelOpen()) + method(2, m.QueueDeclare(queue="ttl"))), NOW)
    data = conn.data_to_send()
    assert closes(data) == [(2, 20, 406)]
    assert b"inequivalent arg 'x-message-ttl' for queue 'ttl'" in data and b"received none" in data


def test_recover_without_requeue_is_540_not_implemented():
    b = broker()
    session, conn = open_session(b)
    session.handle(conn.receive_data(method(1, m.BasicRecover(requeue=True))), NOW)
    assert frames(conn.data_to_send()) == [(60, 111)]
    session.handle(conn.receive_data(method(1, m.BasicRecover(requeue=False))), NOW)
    data = conn.data_to_send()
    assert closes(data) == [(0, 10, 540)] and b"NOT_IMPLEMENTED - requeue=false" in data


def test_guest_from_a_remote_peer_is_refused_with_403():
    b = broker()
    conn = AMQPConnection(server_properties={})
    session = Session(b, conn, wake=no_writer, peer=("10.0.0.1", 1234))
    session.handle(conn.receive_data(
        b"AMQP\x00\x00\x09\x01"
        + encode_method_frame(0, m.ConnectionStartOk({}, "PLAIN", b"\x00guest\x00guest", "en_US"))), NOW)
    data = conn.data_to_send()
    assert closes(data)[-1] == (0, 10, 403) and b"ACCESS_REFUSED - Login was refused" in data
    assert session.user is None and session.id not in b.connections


# ---------------------------------------------------------------------- publishes read together

def publish_with(queue: str, body: bytes, *, exchange: str = "", mandatory: bool = False, immediate: bool = False,
                 expiration: str | None = None) -> bytes:
    props = encode_properties(BasicProperties(delivery_mode=1, expiration=expiration))
    return (method(1, m.BasicPublish(exchange=exchange, routing_key=queue, mandatory=mandatory, immediate=immediate))
            + encode_frame(2, 1, struct.pack(">HHQ", 60, 0, len(body)) + props) + encode_frame(3, 1, body))


def bodies(b: Broker, queue: str) -> list[bytes]:
    got = []
    while (entry := b.vhosts["/"].queues[queue].get(NOW, no_ack=True, owner=None)) is not None:
        got.append(entry.message.body)
    return got


def test_a_read_of_publishes_to_one_queue_is_placed_in_order_with_one_confirm_each():
    b = broker()
    b.vhosts["/"].declare_queue("t", now=NOW, owner=None)
    session, conn = open_session(b)
    session.handle(conn.receive_data(method(1, m.ConfirmSelect())), NOW)
    conn.data_to_send()
    session.handle(conn.receive_data(b"".join(publish_with("t", b"%d" % i) for i in range(5))), NOW)
    assert bodies(b, "t") == [b"0", b"1", b"2", b"3", b"4"]
    data = conn.data_to_send()
    assert frames(data) == [(60, 80)] and struct.unpack_from(">Q", data, 11)[0] == 5  # acks up to tag 5


def test_a_run_with_an_invalid_expiration_places_those_before_it_and_closes_the_channel():
    b = broker()
    b.vhosts["/"].declare_queue("t", now=NOW, owner=None)
    session, conn = open_session(b)
    data = publish_with("t", b"a") + publish_with("t", b"b", expiration="soon") + publish_with("t", b"c")
    session.handle(conn.receive_data(data), NOW)
    assert bodies(b, "t") == [b"a"]
    assert closes(conn.data_to_send()) == [(1, 20, 406)]


def test_immediate_in_a_run_closes_the_connection_after_the_publishes_before_it():
    b = broker()
    b.vhosts["/"].declare_queue("t", now=NOW, owner=None)
    session, conn = open_session(b)
    data = publish_with("t", b"a") + publish_with("t", b"b") + publish_with("t", b"c", immediate=True)
    session.handle(conn.receive_data(data), NOW)
    assert bodies(b, "t") == [b"a", b"b"]
    assert closes(conn.data_to_send()) == [(0, 10, 540)]


def test_unroutable_mandatory_publishes_read_together_each_come_back():
    b = broker()
    session, conn = open_session(b)
    session.handle(conn.receive_data(b"".join(publish_with("nowhere", b"x", mandatory=True) for _ in range(3))), NOW)
    assert frames(conn.data_to_send()) == [(60, 50)] * 3  # basic.return, one per publish
    assert b.vhosts["/"].unroutable == 3
