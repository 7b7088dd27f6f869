"""Delivery's share of the loop: a publisher outrunning the consumers of a queue stops being read
once that queue is saturated (server/broker/saturation.py); a queue without consumers, or whose
consumers stopped taking, never holds its publishers. What a held publisher has in flight in TCP is
bounded by the small receive buffer and segment size of the AMQP sockets (server/app.py,
server/net/socket_bounds.py), and the window of a bulk publisher no saturated queue holds grows,
where a small-message publisher on loopback keeps the small one.

The publisher is a raw socket that writes a whole burst of pipelined publishes at once (from a
thread: ``sendall`` blocks while the broker does not read), so the only thing that can keep the
queue short is the broker not reading it.
"""

from __future__ import annotations

import socket
import struct
import threading
import time

import pika
from e2e_support import raw_open, unique, wait_until
from headrace.server.amqp import methods as m
from headrace.server.amqp.codec import encode_content, encode_method_frame
from headrace.server.broker.saturation import SATURATION_TICK, STALLED_TICKS
from headrace.server.config import Settings
from headrace.server.net.socket_bounds import BULK_PUBLISH, GROW_AFTER

# The defaults (server/config.py): small socket buffers and segments, the gate's bounds.
DEFAULTS = Settings()
RCVBUF, MSS, SATURATED_READY = DEFAULTS.network.amqp_rcvbuf, DEFAULTS.network.amqp_mss, DEFAULTS.network.saturation_ready
BURST = 15_000
FED_BURST = 7_000  # to a queue with a consumer: consumed whole by the test, so kept shorter
BODY = b"s" * 200  # ~265 bytes a publish
# What the queue may reach while the publisher is held: the bound, plus the batch that crossed it
# (one read), plus one more read per publisher that was already being applied. Without the gate the
# whole burst lands in well under the time a one-by-one acking consumer needs to take it.
HELD_DEPTH = SATURATED_READY + 3_000
# The same with pika publishers on sockets of the small receive buffer (doubled by the kernel): the
# bound, plus one read of each of the two publishers (a full receive buffer of ~265-byte publishes),
# plus slack. With Linux's autotuned buffers one read of a held publisher brings up to 256 KiB,
# ~1000 publishes.
PIKA_HELD_DEPTH = SATURATED_READY + 2 * (2 * RCVBUF // 265) + 200
STALL_SECONDS = STALLED_TICKS * SATURATION_TICK


def _burst(port: int, queue: str, count: int, body: bytes = BODY) -> tuple[socket.socket, threading.Thread]:
    """Open a raw connection and channel, then write ``count`` publishes of ``body`` to ``queue`` in
    a thread."""
    sock = raw_open(port)
    sock.sendall(encode_method_frame(1, m.ChannelOpen()))
    sock.recv(65536)  # channel.open-ok
    one = (encode_method_frame(1, m.BasicPublish(exchange="", routing_key=queue))
           + encode_content(1, 60, b"\x00\x00", body, 131072))
    data = one * count
    # sendall's timeout bounds the whole burst, and a held publisher now waits for the consumers
    # instead of having its burst swallowed by MiBs of socket buffers
    sock.settimeout(120)
    thread = threading.Thread(target=sock.sendall, args=(data,), daemon=True)
    thread.start()
    return sock, thread


def _offered_window(sock: socket.socket) -> int:
    """The receive window the broker last offered this client (``tcpi_snd_wnd``, Linux 5.4 on):
    what the client may have in flight toward the broker."""
    info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 232)
    return struct.unpack_from("=I", info, 228)[0]


def _depth(ch: pika.adapters.blocking_connection.BlockingChannel, queue: str) -> int:
    return ch.queue_declare(queue, passive=True).method.message_count


class _Taken:
    """What a one-by-one consumer took: how many, and the longest pause between two deliveries."""

    def __init__(self) -> None:
        self.count = 0
        self.last = 0.0
        self.longest_gap = 0.0


def _consume_one_by_one(ch: pika.adapters.blocking_connection.BlockingChannel, queue: str, prefetch: int) -> _Taken:
    """A consumer on ``ch`` that acks each delivery on its own (slower than a pipelined publisher)."""
    taken = _Taken()

    def on_message(channel, method, props, body) -> None:
        now = time.monotonic()
        if taken.count:
            taken.longest_gap = max(taken.longest_gap, now - taken.last)
        taken.count += 1
        taken.last = now
        channel.basic_ack(method.delivery_tag)

    ch.basic_qos(prefetch_count=prefetch)
    ch.basic_consume(queue, on_message)
    return taken


def test_queue_without_consumers_takes_a_fast_publisher_whole(broker, conn, ch) -> None:
    queue = unique("sat-backlog")
    ch.queue_declare(queue)
    sock, thread = _burst(broker.amqp_port, queue, BURST)
    try:
        assert wait_until(lambda: _depth(ch, queue) == BURST, timeout=30), _depth(ch, queue)
        thread.join(10)
        assert not thread.is_alive()
    finally:
        sock.close()
        ch.queue_delete(queue)


def test_a_bulk_publisher_no_saturated_queue_holds_gets_a_larger_window(broker, conn, ch) -> None:
    """A publisher of BULK_PUBLISH-sized messages into a queue without consumers reads GROW_AFTER
    bytes again and again, and its window doubles each time: the broker offers it far more than the
    16 KiB every connection starts with, so a bulk publisher on a LAN is not capped at 16 KiB per
    round trip."""
    queue = unique("sat-bulk")
    ch.queue_declare(queue)
    body = b"b" * BULK_PUBLISH
    count = 4 * GROW_AFTER // len(body)  # past the first three doublings
    sock, thread = _burst(broker.amqp_port, queue, count, body)
    try:
        assert wait_until(lambda: _depth(ch, queue) == count, timeout=60), _depth(ch, queue)
        thread.join(10)
        assert not thread.is_alive()
        assert _offered_window(sock) > 4 * RCVBUF, _offered_window(sock)
    finally:
        sock.close()
        ch.queue_delete(queue)


def test_a_small_message_publisher_on_loopback_keeps_the_small_window(broker, conn, ch) -> None:
    """The same number of bytes in ~265-byte publishes: on a link as fast as loopback the small
    window does not cap them (~28 KiB a round trip of microseconds), and it is what keeps the
    publisher's writes packed, so it never grows."""
    queue = unique("sat-small")
    ch.queue_declare(queue)
    count = 4 * GROW_AFTER // len(BODY)
    sock, thread = _burst(broker.amqp_port, queue, count)
    try:
        assert wait_until(lambda: _depth(ch, queue) == count, timeout=60), _depth(ch, queue)
        thread.join(10)
        assert not thread.is_alive()
        assert _offered_window(sock) <= 2 * RCVBUF, _offered_window(sock)
    finally:
        sock.close()
        ch.queue_delete(queue)


def test_saturated_queue_holds_its_publisher(broker, conn, ch) -> None:
    queue = unique("sat-fed")
    ch.queue_declare(queue)
    got = _consume_one_by_one(ch, queue, 20)
    watcher = conn.channel()
    sock, thread = _burst(broker.amqp_port, queue, FED_BURST)
    peak = 0
    try:
        def all_consumed() -> bool:
            nonlocal peak
            peak = max(peak, _depth(watcher, queue))
            return got.count == FED_BURST

        assert wait_until(all_consumed, conn, timeout=90), (got.count, peak)
        thread.join(10)
        assert not thread.is_alive()
        assert peak <= HELD_DEPTH, peak
        # held before it read GROW_AFTER bytes: its window never grew (2 x 16 KiB, a bit under)
        assert _offered_window(sock) <= 2 * RCVBUF, _offered_window(sock)
    finally:
        sock.close()
        ch.queue_delete(queue)


def test_stalled_consumer_does_not_hold_the_publisher(broker, conn, ch) -> None:
    queue = unique("sat-stalled")
    ch.queue_declare(queue)
    ch.basic_qos(prefetch_count=10)
    ch.basic_consume(queue, lambda *args: None)  # takes ten and never acks
    sock, thread = _burst(broker.amqp_port, queue, BURST)
    try:
        assert wait_until(lambda: _depth(ch, queue) == BURST - 10, conn, timeout=30), _depth(ch, queue)
        thread.join(10)
        assert not thread.is_alive()
    finally:
        sock.close()
        ch.queue_delete(queue)


def test_clients_are_offered_small_segments(broker) -> None:
    """The listener's segment bound reaches the client in the SYN-ACK: its segments, and so the send
    buffer Linux sizes from them, stay small even on loopback (64 KiB segments otherwise)."""
    sock = raw_open(broker.amqp_port)
    try:
        assert 0 < sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG) <= MSS
    finally:
        sock.close()


def test_clients_keep_the_window_scale_with_the_small_window(broker) -> None:
    """The small window is set on each accepted socket, not on the listener: a listener's 16 KiB
    buffer would offer no window scale in the SYN-ACK, capping every connection's window at 64 KiB
    for its life, long links included."""
    sock = raw_open(broker.amqp_port)
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 8)
        assert info[6] & 0x0F > 0  # tcpi_snd_wscale: the scale the broker offered
    finally:
        sock.close()


def _pika_publisher(url: str, queue: str, count: int, failures: list[BaseException]) -> None:
    try:
        conn = pika.BlockingConnection(pika.URLParameters(url))
        ch = conn.channel()
        for _ in range(count):
            ch.basic_publish("", queue, BODY)  # blocks while the broker does not read us
        conn.close()
    except BaseException as exc:  # reported by the test thread
        failures.append(exc)


def test_pika_publishers_held_by_a_saturated_queue_stay_bounded_and_resume(broker, conn, ch) -> None:
    """Two pika publishers at full speed into a queue one pika consumer takes one ack at a time:
    the queue reaches the bound, never goes far past it (each read of a held publisher is one small
    receive window), and the publishers are read again until every message got through."""
    queue = unique("sat-pika")
    per = 4_000
    ch.queue_declare(queue)
    got = _consume_one_by_one(ch, queue, 10)
    watcher = conn.channel()
    failures: list[BaseException] = []
    threads = [threading.Thread(target=_pika_publisher, args=(broker.url, queue, per, failures), daemon=True)
               for _ in range(2)]
    for thread in threads:
        thread.start()
    peak = 0
    try:
        def all_consumed() -> bool:
            nonlocal peak
            peak = max(peak, _depth(watcher, queue))
            return got.count == 2 * per or bool(failures)

        assert wait_until(all_consumed, conn, timeout=120), (got.count, peak)
        assert not failures, failures
        for thread in threads:
            thread.join(10)
            assert not thread.is_alive()
        assert got.count == 2 * per
        assert peak >= SATURATED_READY, peak  # the publishers were held
        # Consumers that delivered nothing for a second count as stalled and exempt the queue
        # (saturation.py), and then the publishers' socket buffers are read whole: on a machine
        # loaded enough to starve this process that long, the depth bound does not apply.
        if got.longest_gap < STALL_SECONDS - 0.2:
            assert peak <= PIKA_HELD_DEPTH, (peak, got.longest_gap)
    finally:
        ch.queue_delete(queue)
