"""How a connection ends: the close handshake completes cleanly whoever starts it and whatever the
client still has in flight, and what the connection held (exclusive queues) is free the moment it
is gone, however it went."""

from __future__ import annotations

import socket
import struct
import threading

import httpx
import pika
import pika.exceptions
import pytest
from e2e_support import raw_open, recv_until_closed, unique, wait_until
from headrace.server.amqp import methods as m
from headrace.server.amqp.codec import encode_frame, encode_method_frame

pytestmark = pytest.mark.timeout(60)

CLOSE_OK = encode_method_frame(0, m.ConnectionCloseOk())


def publish_frames(queue: str, count: int, size: int) -> bytes:
    header = encode_frame(2, 1, struct.pack(">HHQH", 60, 0, size, 0))
    one = (encode_method_frame(1, m.BasicPublish(exchange="", routing_key=queue)) + header
           + encode_frame(3, 1, b"x" * size))
    return one * count


def test_client_close_with_publishes_buffered_behind_it_gets_close_ok_not_a_reset(broker):
    sock = raw_open(broker.amqp_port)
    sock.sendall(encode_method_frame(1, m.ChannelOpen()))
    sock.recv(65536)  # channel.open-ok
    # close first, then 4 MB the client had queued after it: the broker must not hang up with those
    # unread (the kernel would answer them with a reset)
    trailing = publish_frames(unique("never"), 1000, 4000)
    sender = threading.Thread(target=sock.sendall, args=(encode_method_frame(0, m.ConnectionClose(200, "bye", 0, 0))
                                                         + trailing,))
    sender.start()
    sock.settimeout(10)
    got = b""
    while CLOSE_OK not in got:
        chunk = sock.recv(65536)
        assert chunk, got
        got += chunk
    sender.join(10)
    sock.shutdown(socket.SHUT_WR)  # the client hangs up after close-ok, as the spec has it
    assert recv_until_closed(sock) == b""  # then the broker does: an orderly close, no ECONNRESET
    sock.close()


def test_server_close_discards_frames_until_close_ok_then_hangs_up(broker):
    sock = raw_open(broker.amqp_port)
    sock.sendall(encode_method_frame(1, m.QueueDeclare(queue="x")))  # channel not open: connection error 504
    sock.settimeout(10)
    got = b""
    while b"\x00\x0a\x00\x32" not in got:
        chunk = sock.recv(65536)
        assert chunk, got
        got += chunk
    assert b"CHANNEL_ERROR" in got
    # the client had more in flight: discarded, not answered, and not fatal to the close handshake
    sock.sendall(encode_method_frame(1, m.ChannelOpen()) + publish_frames("ignored", 200, 1000) + CLOSE_OK)
    assert recv_until_closed(sock) == b""
    sock.close()


def test_pika_publisher_closed_by_the_broker_sees_the_close_not_a_reset(broker):
    name = unique("closed-by-admin")
    params = pika.URLParameters(broker.url)
    params.client_properties = {"connection_name": name}
    conn = pika.BlockingConnection(params)
    ch = conn.channel()
    q = ch.queue_declare(name, auto_delete=True).method.queue
    with httpx.Client(base_url=broker.http_url, auth=("guest", "guest"), timeout=10) as http:
        ours = [c["name"] for c in http.get("/api/connections").json()
                if c["client_properties"].get("connection_name") == name]
        assert len(ours) == 1
        closer = threading.Timer(0.3, lambda: http.delete(f"/api/connections/{ours[0]}"))
        closer.start()
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as info:
            while True:  # a publisher with frames in flight when the close arrives
                ch.basic_publish("", q, b"y" * 2000)
                conn.process_data_events(time_limit=0)
        closer.join()
    assert info.value.reply_code == 320


def test_pika_close_after_many_publishes_is_clean(broker):
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    ch = conn.channel()
    q = ch.queue_declare(unique("flushed")).method.queue
    for _ in range(2000):
        ch.basic_publish("", q, b"z" * 1000)
    conn.close()  # raises on a reset instead of close-ok
    assert conn.is_closed
    with pika.BlockingConnection(pika.URLParameters(broker.url)) as again:
        assert again.channel().queue_declare(q, passive=True).method.message_count == 2000


@pytest.mark.parametrize("how", ["fin", "rst"])
def test_exclusive_queue_is_free_the_moment_its_connection_is_gone(broker, how):
    name = unique(f"exclusive-{how}")
    sock = raw_open(broker.amqp_port)
    sock.sendall(encode_method_frame(1, m.ChannelOpen()))
    sock.recv(65536)
    sock.sendall(encode_method_frame(1, m.QueueDeclare(queue=name, exclusive=True)))
    assert name.encode() in sock.recv(65536)  # declare-ok
    if how == "rst":
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()  # no connection.close: the TCP connection just ends
    with pika.BlockingConnection(pika.URLParameters(broker.url)) as conn:
        ch = conn.channel()  # at once: no 405 RESOURCE_LOCKED
        assert ch.queue_declare(name, exclusive=True).method.queue == name
        assert wait_until(lambda: True, conn)
