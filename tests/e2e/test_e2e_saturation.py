"""Delivery's share of the loop: a publisher outrunning the consumers of a queue stops being read
once that queue is saturated (server/broker/saturation.py); a queue without consumers, or whose
consumers stopped taking, never holds its publishers.

The publisher is a raw socket that writes a whole burst of pipelined publishes at once (from a
thread: ``sendall`` blocks while the broker does not read), so the only thing that can keep the
queue short is the broker not reading it.
"""

from __future__ import annotations

import socket
import threading

import pika
from e2e_support import raw_open, unique, wait_until
from headrace.server.amqp import methods as m
from headrace.server.amqp.codec import encode_content, encode_method_frame
from headrace.server.broker.saturation import SATURATED_READY

BURST = 15_000
FED_BURST = 7_000  # to a queue with a consumer: consumed whole by the test, so kept shorter
BODY = b"s" * 200  # ~265 bytes a publish: a 256 KiB read applies ~1000 of them at once
# What the queue may reach while the publisher is held: the bound, plus the batch that crossed it
# (one read), plus one more read per publisher that was already being applied. Without the gate the
# whole burst lands in well under the time a one-by-one acking consumer needs to take it.
HELD_DEPTH = SATURATED_READY + 3_000


def _burst(port: int, queue: str, count: int) -> tuple[socket.socket, threading.Thread]:
    """Open a raw connection and channel, then write ``count`` publishes to ``queue`` in a thread."""
    sock = raw_open(port)
    sock.sendall(encode_method_frame(1, m.ChannelOpen()))
    sock.recv(65536)  # channel.open-ok
    one = (encode_method_frame(1, m.BasicPublish(exchange="", routing_key=queue))
           + encode_content(1, 60, b"\x00\x00", BODY, 131072))
    data = one * count
    thread = threading.Thread(target=sock.sendall, args=(data,), daemon=True)
    thread.start()
    return sock, thread


def _depth(ch: pika.adapters.blocking_connection.BlockingChannel, queue: str) -> int:
    return ch.queue_declare(queue, passive=True).method.message_count


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


def test_saturated_queue_holds_its_publisher(broker, conn, ch) -> None:
    queue = unique("sat-fed")
    ch.queue_declare(queue)
    ch.basic_qos(prefetch_count=20)  # acked one by one from this process: slower than the burst
    got = 0

    def on_message(channel, method, props, body) -> None:
        nonlocal got
        got += 1
        channel.basic_ack(method.delivery_tag)

    ch.basic_consume(queue, on_message)
    watcher = conn.channel()
    sock, thread = _burst(broker.amqp_port, queue, FED_BURST)
    peak = 0
    try:
        def all_consumed() -> bool:
            nonlocal peak
            peak = max(peak, _depth(watcher, queue))
            return got == FED_BURST

        assert wait_until(all_consumed, conn, timeout=90), (got, peak)
        thread.join(10)
        assert not thread.is_alive()
        assert peak <= HELD_DEPTH, peak
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
