"""Security rules seen from a Session without sockets: revocation on open connections, deleted users
and vhosts, and the bound on uncommitted transactions."""

from __future__ import annotations

import struct

from headrace.server.amqp import methods as m
from headrace.server.amqp.codec import encode_frame, encode_method_frame
from headrace.server.amqp.connection import AMQPConnection
from headrace.server.auth import Permission, hash_password
from headrace.server.broker import Broker, Limits
from headrace.server.session import Session
from session_support import handshake
from shell_ports import no_writer, shell_ports

NOW = 1000.0  # the broker time the calls below pass

PASSWORDS = {"alice": "pw", "guest": "guest"}
CAPS = {"capabilities": {"connection.blocked": True}}


def open_session(broker: Broker, user: str = "alice", vhost: str = "/") -> tuple[Session, AMQPConnection]:
    conn = AMQPConnection(server_properties={})
    session = Session(broker, conn, wake=no_writer)
    session.handle(conn.receive_data(handshake(user, PASSWORDS[user], vhost, CAPS)), NOW)
    conn.data_to_send()
    assert session.id in broker.connections
    return session, conn


def publish(queue: str, body: bytes = b"x") -> bytes:
    return (encode_method_frame(1, m.BasicPublish(exchange="", routing_key=queue))
            + encode_frame(2, 1, struct.pack(">HHQ", 60, 0, len(body)) + b"\x00\x00")
            + encode_frame(3, 1, body))


def closes(data: bytes) -> list[tuple[int, int, int, str]]:
    """(channel, class, method, reply code + text) of every channel.close / connection.close sent."""
    out, pos = [], 0
    while pos < len(data):
        ftype, channel, size = struct.unpack_from(">BHI", data, pos)
        if ftype == 1:
            cls, meth = struct.unpack_from(">HH", data, pos + 7)
            if (cls, meth) in ((20, 40), (10, 50)):
                code, tlen = struct.unpack_from(">HB", data, pos + 11)
                out.append((channel, cls, code, data[pos + 14:pos + 14 + tlen].decode()))
        pos += 8 + size
    return out


def methods(data: bytes) -> list[tuple[int, int, int]]:
    out, pos = [], 0
    while pos < len(data):
        ftype, channel, size = struct.unpack_from(">BHI", data, pos)
        if ftype == 1:
            out.append((channel, *struct.unpack_from(">HH", data, pos + 7)))
        pos += 8 + size
    return out


def make_broker(**limits: int) -> Broker:
    b = Broker(ports=shell_ports(), limits=Limits(**limits))
    b.ensure_default("/", "guest", "guest")
    b.users.add_user("alice", None, password_hash=hash_password("pw", iterations=1000))
    b.users.set_permission("alice", "/", Permission())
    b.vhosts["/"].declare_queue("q", now=NOW, owner=None)
    return b


def test_revoked_write_permission_applies_to_the_next_publish():
    b = make_broker()
    session, conn = open_session(b)
    session.handle(conn.receive_data(publish("q")), NOW)
    assert closes(conn.data_to_send()) == [] and b.vhosts["/"].queues["q"].messages_ready == 1
    b.users.set_permission("alice", "/", Permission(write="^$"))
    session.handle(conn.receive_data(publish("q")), NOW)
    assert closes(conn.data_to_send()) == [
        (1, 20, 403, "ACCESS_REFUSED - write access to exchange 'amq.default' in vhost '/' refused for user 'alice'")]
    assert b.vhosts["/"].queues["q"].messages_ready == 1


def test_deleting_the_user_or_the_vhost_closes_connections_with_320():
    b = make_broker()
    alice, alice_conn = open_session(b)
    guest, guest_conn = open_session(b, "guest")
    assert b.users.delete_user("alice")
    assert closes(alice_conn.data_to_send()) == [(0, 10, 320, "CONNECTION_FORCED - user 'alice' is deleted")]
    assert alice.id not in b.connections and guest.id in b.connections
    assert closes(guest_conn.data_to_send()) == []
    b.add_vhost("v")
    b.users.set_permission("guest", "v", Permission())
    on_v, on_v_conn = open_session(b, "guest", "v")
    on_v.handle(on_v_conn.receive_data(encode_method_frame(1, m.QueueDeclare(queue="excl", exclusive=True))), NOW)
    on_v_conn.data_to_send()
    assert b.delete_vhost("v")
    assert closes(on_v_conn.data_to_send()) == [(0, 10, 320, "CONNECTION_FORCED - vhost 'v' is deleted")]
    assert on_v.id not in b.connections and guest.id in b.connections


def test_uncommitted_transaction_is_held_memory_and_bounded():
    b = make_broker(max_tx_bytes=3000)
    session, conn = open_session(b)
    session.handle(conn.receive_data(encode_method_frame(1, m.TxSelect())), NOW)
    base = b.held_memory()
    session.handle(conn.receive_data(publish("q", b"a" * 1000) * 2), NOW)
    assert session.tx_bytes == 2004 and b.held_memory() >= base + 2004
    assert b.tx_bytes == 2004 and b.open_channels == 1  # the broker's totals, which the alarm reads
    b.set_alarm("memory", True)
    assert session.read_paused  # a transactional publisher is paused too, before it commits ...
    assert (0, 10, 60) in methods(conn.data_to_send())  # ... and told so with connection.blocked
    b.set_alarm("memory", False)
    assert (0, 10, 61) in methods(conn.data_to_send())
    session.handle(conn.receive_data(encode_method_frame(1, m.TxCommit())), NOW)
    assert session.tx_bytes == 0 and b.vhosts["/"].queues["q"].messages_ready == 2
    session.handle(conn.receive_data(publish("q", b"b" * 1000) * 2 + encode_method_frame(1, m.TxRollback())), NOW)
    assert session.tx_bytes == 0 and b.tx_bytes == 0
    conn.data_to_send()
    session.handle(conn.receive_data(publish("q", b"c" * 1000) * 3), NOW)  # the third crosses 3000
    assert closes(conn.data_to_send()) == [
        (1, 20, 406, "PRECONDITION_FAILED - transaction too large: uncommitted publishes exceed "
                     "max_tx_bytes (3000)")]
    assert session.tx_bytes == 0 and b.vhosts["/"].queues["q"].messages_ready == 2
    assert b.tx_bytes == 0 and b.open_channels == 0  # the channel the 406 closed


def test_refused_login_with_pipelined_open_sends_one_close():
    b = make_broker()
    conn = AMQPConnection(server_properties={})
    session = Session(b, conn, wake=no_writer)
    session.handle(conn.receive_data(handshake("alice", "wrong")), NOW)
    sent = closes(conn.data_to_send())
    assert [(c[0], c[1], c[2]) for c in sent] == [(0, 10, 403)]
    assert session.vhost is None and not b.connections
