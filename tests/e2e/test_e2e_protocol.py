"""Wire-level behaviour over real sockets: handshake errors, hostile frames, heartbeats, properties,
priorities, delayed messages, RPC, SelectConnection, shutdown with 320."""

from __future__ import annotations

import datetime
import signal
import socket
import struct
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pika
import pika.exceptions
import pytest
from e2e_support import raw_open, recv_until_closed, unique
from headrace.server.amqp import methods as m
from headrace.server.amqp.codec import encode_frame, encode_method_frame

pytestmark = pytest.mark.timeout(60)


def close_code(sock: socket.socket) -> int:
    """Reply code of the server's connection.close; answers close-ok and waits for the hang-up."""
    marker = b"\x00\x0a\x00\x32"
    sock.settimeout(10)
    data = b""
    while marker not in data or len(data) < data.find(marker) + 6:
        chunk = sock.recv(65536)
        assert chunk, data
        data += chunk
    i = data.find(marker)
    sock.sendall(encode_method_frame(0, m.ConnectionCloseOk()))
    recv_until_closed(sock)
    return struct.unpack_from(">H", data, i + 4)[0]


def publish_with_properties(props_raw: bytes) -> bytes:
    """channel.open, then a basic.publish whose content header carries these property bytes."""
    header = struct.pack(">HHQ", 60, 0, 1) + props_raw
    return (encode_method_frame(1, m.ChannelOpen())
            + encode_method_frame(1, m.BasicPublish(exchange="", routing_key="q"))
            + encode_frame(2, 1, header) + encode_frame(3, 1, b"x"))


def test_wrong_protocol_header_gets_ours_and_close(broker):
    sock = socket.create_connection(("127.0.0.1", broker.amqp_port), timeout=10)
    sock.sendall(b"AMQP\x01\x01\x00\x0a")
    assert recv_until_closed(sock) == b"AMQP\x00\x00\x09\x01"


@pytest.mark.parametrize(
    ("frames", "code"),
    [
        (encode_frame(1, 1, b"\x00\x14\x00\x0a\x00")[:-1] + b"\x00", 501),  # bad frame end
        (encode_frame(9, 0, b""), 501),  # unknown frame type
        (encode_method_frame(1, m.ChannelOpen()) + encode_frame(3, 1, b"body"), 505),  # body without header
        (encode_method_frame(1, m.ChannelOpen()) + encode_method_frame(1, m.ChannelOpen()), 504),  # second open
        (encode_method_frame(1, m.QueueDeclare(queue="x")), 504),  # channel not open
        (encode_method_frame(1, m.ChannelOpen()) + encode_method_frame(1, m.BasicPublish(exchange="", routing_key="q",
                                                                                       immediate=True))
         + encode_frame(2, 1, struct.pack(">HHQ", 60, 0, 0) + b"\x00\x00"), 540),
        (encode_frame(1, 0, b"\x00\x0a\x00\x63"), 503),  # unknown method
        (encode_frame(1, 0, b"\x00"), 501),  # method frame too short
        # content properties that do not parse: connection.close 541, as RabbitMQ
        (publish_with_properties(b"\x90\x01\x02"), 541),  # continuation bit, no next flag word
        (publish_with_properties(b"\x00\x01"), 541),  # continuation bit alone
        (publish_with_properties(b"\x80\x00\x09abc"), 541),  # content type past the end
        (publish_with_properties(b"\x20\x00\x00\x00\x00\x05\x01aZxxx"), 541),  # bad headers table
        (publish_with_properties(b"\x10\x00\x02junk"), 541),  # bytes after the last property
    ],
)
def test_hostile_frames_close_that_connection_only(broker, frames, code):
    bystander = pika.BlockingConnection(pika.URLParameters(broker.url))
    sock = raw_open(broker.amqp_port)
    sock.sendall(frames)
    assert close_code(sock) == code
    ch = bystander.channel()  # others keep working
    q = ch.queue_declare("", exclusive=True).method.queue
    ch.basic_publish("", q, b"alive")
    assert ch.basic_get(q, auto_ack=True)[2] == b"alive"
    bystander.close()


def test_channel_ids_above_channel_max_are_accepted_and_channel_max_counts_open_channels(broker_factory):
    """As RabbitMQ 3.10: any id in 1..65535 opens; channel_max limits how many are open at once."""
    proc = broker_factory(env={"HEADRACE_CHANNEL_MAX": "2"})
    conn = pika.BlockingConnection(pika.URLParameters(proc.url))
    high = conn.channel(channel_number=65000)
    other = conn.channel(channel_number=60000)
    q = high.queue_declare("", exclusive=True).method.queue
    high.basic_publish("", q, b"on 65000")
    assert other.basic_get(q, auto_ack=True)[2] == b"on 65000"
    other.close()
    again = conn.channel(channel_number=3)  # a closed channel no longer counts
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as info:
        conn.channel(channel_number=4)
    assert info.value.reply_code == 530
    assert info.value.reply_text == ("NOT_ALLOWED - number of channels opened (2) has reached the negotiated "
                                     "channel_max (2)")
    assert not again.is_open and not conn.is_open


def read_methods(sock: socket.socket, until: Callable[[list[tuple[int, Any]]], bool]) -> list[tuple[int, Any]]:
    """(channel, method) of each method frame the broker sends, read until ``until`` holds or the
    broker hangs up; its connection.close is answered with close-ok."""
    sock.settimeout(10)
    data = b""
    got: list[tuple[int, Any]] = []
    while not until(got):
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
        while len(data) >= 7 and len(data) >= 8 + struct.unpack_from(">I", data, 3)[0]:
            ftype, channel, size = struct.unpack_from(">BHI", data)
            if ftype == 1:
                got.append((channel, m.decode_method(data[7:7 + size])))
                if isinstance(got[-1][1], m.ConnectionClose):
                    sock.sendall(encode_method_frame(0, m.ConnectionCloseOk()))
            data = data[8 + size:]
    return got


@pytest.fixture
def one_channel_user(http) -> Iterator[str]:
    """A user allowed one channel at a time (RabbitMQ's max-channels user limit)."""
    user = unique("onechan")
    assert http.put(f"/api/users/{user}", json={"password": "pw", "tags": ""}).status_code == 201
    assert http.put(f"/api/permissions/%2F/{user}",
                    json={"configure": ".*", "write": ".*", "read": ".*"}).status_code in (201, 204)
    assert http.put(f"/api/user-limits/{user}/max-channels", json={"value": 1}).status_code == 204
    yield user
    http.delete(f"/api/users/{user}")


def test_user_channel_limit_refuses_the_next_channel_with_530_and_no_open_ok(broker, one_channel_user):
    """As RabbitMQ 3.10: no channel.open-ok, connection.close 530 with its text and no failed method."""
    text = (f"NOT_ALLOWED - number of channels opened for user '{one_channel_user}' has reached the maximum "
            "allowed user limit of (1)")
    params = pika.ConnectionParameters("127.0.0.1", broker.amqp_port,
                                       credentials=pika.PlainCredentials(one_channel_user, "pw"))
    conn = pika.BlockingConnection(params)
    first = conn.channel()
    first.queue_declare("", exclusive=True)
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as info:
        conn.channel()
    assert (info.value.reply_code, info.value.reply_text) == (530, text)
    assert not conn.is_open
    # on the wire: the first channel opens, the second gets nothing but the close
    sock = raw_open(broker.amqp_port, user=one_channel_user, password="pw")
    sock.sendall(encode_method_frame(1, m.ChannelOpen()))
    assert [(ch, meth.NAME) for ch, meth in read_methods(sock, bool)] == [(1, "channel.open-ok")]
    sock.sendall(encode_method_frame(2, m.ChannelOpen()) + encode_method_frame(2, m.BasicQos(prefetch_count=1)))
    sent = read_methods(sock, lambda got: False)  # until the broker hangs up after our close-ok
    sock.close()
    assert [(ch, meth.NAME) for ch, meth in sent] == [(0, "connection.close")]
    close = sent[0][1]
    assert (close.reply_code, close.reply_text, close.class_id, close.method_id) == (530, text, 0, 0)


def test_oversized_message_closes_channel_with_406(broker):
    sock = raw_open(broker.amqp_port)
    sock.sendall(encode_method_frame(1, m.ChannelOpen()))
    sock.recv(65536)
    header = struct.pack(">HHQ", 60, 0, 1 << 40) + b"\x00\x00"
    sock.sendall(encode_method_frame(1, m.BasicPublish(exchange="", routing_key="q")) + encode_frame(2, 1, header))
    data = sock.recv(65536)
    assert b"\x00\x14\x00\x28" in data and b"PRECONDITION_FAILED" in data  # channel.close 406
    sock.close()


def test_silent_client_is_dropped_after_two_heartbeats(broker):
    sock = raw_open(broker.amqp_port, heartbeat=1)
    data = recv_until_closed(sock, timeout=15)  # we never answer: the broker hangs up
    assert data.count(b"\x08\x00\x00\x00\x00\x00\x00\xce") >= 1  # it sent heartbeats first


def test_properties_round_trip(broker):
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    ch = conn.channel()
    q = ch.queue_declare("", exclusive=True).method.queue
    stamp = 1_700_000_000
    props = pika.BasicProperties(
        content_type="application/json", content_encoding="utf-8", delivery_mode=2, priority=7,
        correlation_id="c-1", reply_to="r", expiration="60000", message_id="m-1", timestamp=stamp,
        type="t", user_id="guest", app_id="app",
        headers={"s": "str", "i": 42, "neg": -5, "big": 1 << 40, "b": True, "none": None,
                 "nested": {"list": [1, "two", {"three": 3}], "bytes": b"\x00\x01"},
                 "when": datetime.datetime(2024, 1, 2, 3, 4, 5)},
    )
    ch.basic_publish("", q, b"", props)
    _, got, body = ch.basic_get(q, auto_ack=True)
    assert body == b""
    for field in ("content_type", "content_encoding", "delivery_mode", "priority", "correlation_id", "reply_to",
                  "expiration", "message_id", "timestamp", "type", "user_id", "app_id"):
        assert getattr(got, field) == getattr(props, field), field
    h = got.headers
    assert h["s"] == "str" and h["i"] == 42 and h["neg"] == -5 and h["big"] == 1 << 40
    assert h["b"] is True and h["none"] is None and h["nested"]["list"] == [1, "two", {"three": 3}]
    assert h["nested"]["bytes"] == b"\x00\x01" and h["when"].replace(tzinfo=None) == datetime.datetime(2024, 1, 2, 3, 4, 5)
    conn.close()


def test_priority_queue_delivers_highest_first(broker):
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    ch = conn.channel()
    q = ch.queue_declare("", exclusive=True, arguments={"x-max-priority": 10}).method.queue
    for body, prio in ((b"low", 1), (b"high", 9), (b"mid", 5)):
        ch.basic_publish("", q, body, pika.BasicProperties(priority=prio))
    assert [ch.basic_get(q, auto_ack=True)[2] for _ in range(3)] == [b"high", b"mid", b"low"]
    conn.close()


def test_delayed_message_exchange(broker):
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    ch = conn.channel()
    ex = unique("delayed")
    ch.exchange_declare(ex, "x-delayed-message", arguments={"x-delayed-type": "direct"})
    q = ch.queue_declare("", exclusive=True).method.queue
    ch.queue_bind(q, ex, "k")
    ch.basic_publish(ex, "k", b"later", pika.BasicProperties(headers={"x-delay": 300}))
    ch.basic_publish(ex, "k", b"now")
    assert ch.basic_get(q, auto_ack=True)[2] == b"now"
    assert ch.basic_get(q)[0] is None
    for method, _, body in ch.consume(q, auto_ack=True, inactivity_timeout=5):
        assert body == b"later"
        break
    ch.cancel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        conn.channel().exchange_declare(unique("bad"), "x-delayed-message")
    assert info.value.reply_code == 406
    conn.close()


def test_rpc_with_reply_to_and_correlation_id(broker):
    server = pika.BlockingConnection(pika.URLParameters(broker.url))
    sch = server.channel()
    rpc_queue = sch.queue_declare(unique("rpc"), exclusive=True).method.queue

    def serve() -> None:
        for method, props, body in sch.consume(rpc_queue, inactivity_timeout=10):
            if method is None:
                return
            sch.basic_publish("", props.reply_to, body.upper(),
                              pika.BasicProperties(correlation_id=props.correlation_id))
            sch.basic_ack(method.delivery_tag)
            return

    thread = threading.Thread(target=serve)
    thread.start()
    client = pika.BlockingConnection(pika.URLParameters(broker.url))
    cch = client.channel()
    callback = cch.queue_declare("", exclusive=True).method.queue
    corr = str(uuid.uuid4())
    cch.basic_publish("", rpc_queue, b"ping", pika.BasicProperties(reply_to=callback, correlation_id=corr))
    for method, props, body in cch.consume(callback, auto_ack=True, inactivity_timeout=10):
        assert (body, props.correlation_id) == (b"PING", corr)
        break
    thread.join(10)
    client.close()
    server.close()


def test_select_connection_publish_and_consume(broker):
    received: list[bytes] = []
    q = unique("sel")

    def on_open(conn: pika.SelectConnection) -> None:
        conn.channel(on_open_callback=on_channel)

    def on_channel(ch) -> None:
        def declared(_frame) -> None:
            ch.basic_consume(q, on_message)
            for i in range(3):
                ch.basic_publish("", q, b"s%d" % i)

        def on_message(channel, method, props, body) -> None:
            received.append(body)
            channel.basic_ack(method.delivery_tag)
            if len(received) == 3:
                channel.connection.close()

        ch.queue_declare(q, exclusive=True, callback=declared)

    conn = pika.SelectConnection(pika.URLParameters(broker.url), on_open_callback=on_open,
                                 on_close_callback=lambda c, reason: c.ioloop.stop())
    conn.ioloop.call_later(20, conn.ioloop.stop)
    conn.ioloop.start()
    assert received == [b"s0", b"s1", b"s2"]


def test_sigterm_sends_connection_forced_and_exits_zero(broker_factory):
    proc = broker_factory()
    conn = pika.BlockingConnection(pika.URLParameters(proc.url))
    proc.signal(signal.SIGTERM)
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as info:
        conn.process_data_events(time_limit=10)
        conn.channel()
    assert info.value.reply_code == 320
    assert proc.wait(15) == 0


def test_consumer_timeout_closes_channel_and_requeues(broker_factory):
    proc = broker_factory(env={"HEADRACE_CONSUMER_TIMEOUT_MS": "300"})
    conn = pika.BlockingConnection(pika.URLParameters(proc.url))
    ch = conn.channel()
    q = ch.queue_declare("slow-consumer").method.queue
    ch.basic_publish("", q, b"held")
    reasons = []
    ch._impl.add_on_close_callback(lambda channel, reason: reasons.append(reason))
    assert ch.basic_get(q)[2] == b"held"  # never acked
    for _ in range(50):
        conn.process_data_events(time_limit=0.1)
        if reasons:
            break
    assert reasons and reasons[0].reply_code == 406 and "timed out" in reasons[0].reply_text
    method, _, body = conn.channel().basic_get(q, auto_ack=True)
    assert body == b"held" and method.redelivered
    conn.close()


def test_queue_expires_when_unused(broker):
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    ch = conn.channel()
    q = ch.queue_declare(unique("expiring"), arguments={"x-expires": 200}).method.queue
    gone = False
    # the broker's clock runs every 100 ms; poll over HTTP, not a timer (a passive declare would
    # renew the lease, as in RabbitMQ)
    with httpx.Client(base_url=broker.http_url, auth=("guest", "guest"), timeout=5) as http:
        for _ in range(50):
            conn.process_data_events(time_limit=0.1)
            if http.get(f"/api/queues/%2F/{q}").status_code == 404:
                gone = True
                break
    assert gone
    conn.close()
