"""Fault probes against real broker processes, completing the ones kept elsewhere (the list is in
README.md, "Reliability", "Fault probes"): malformed frames of each class answered by RabbitMQ's
connection.close code with the broker serving on; kill -9 during a queue-delete storm and during
publishes and purges; SIGTERM under confirmed load."""

from __future__ import annotations

import itertools
import random
import signal
import struct
import threading
from typing import Any

import pika
import pika.exceptions
import pytest
from e2e_support import connection_close_of, raw_open, wait_until
from headrace.server.amqp import methods as m
from headrace.server.amqp.codec import encode_frame, encode_method_frame

pytestmark = pytest.mark.timeout(120)

PERSISTENT = pika.BasicProperties(delivery_mode=2)
OPEN = encode_method_frame(1, m.ChannelOpen())
PUBLISH = OPEN + encode_method_frame(1, m.BasicPublish(exchange="", routing_key="nowhere"))


def header(class_id: int = 60, size: int = 1, weight: int = 0, props: bytes = b"\x00\x00") -> bytes:
    return encode_frame(2, 1, struct.pack(">HHQ", class_id, weight, size) + props)


# one case per frame class, each answered as RabbitMQ 3.10's reader and command assembler answer it
MALFORMED = {
    # method frames
    "method-unknown": (encode_frame(1, 0, b"\x00\x0a\x00\x63"), 503),
    "method-truncated": (encode_frame(1, 0, b"\x00"), 501),
    "method-during-content": (PUBLISH + encode_method_frame(1, m.BasicQos(0, 1, False)), 505),
    # content header frames
    "header-without-method": (OPEN + header(), 505),
    "header-other-class": (PUBLISH + header(class_id=50), 505),
    "header-nonzero-weight": (PUBLISH + header(weight=1), 505),
    "header-truncated": (PUBLISH + encode_frame(2, 1, b"\x00\x3c\x00"), 501),
    "header-on-channel-0": (encode_frame(2, 0, struct.pack(">HHQ", 60, 0, 0) + b"\x00\x00"), 505),
    # content body frames
    "body-without-header": (PUBLISH + encode_frame(3, 1, b"x"), 505),
    "body-on-channel-0": (encode_frame(3, 0, b"x"), 505),
    # heartbeat frames
    "heartbeat-on-channel-1": (OPEN + encode_frame(8, 1, b""), 505),
    "heartbeat-with-payload": (encode_frame(8, 0, b"\x00\x00"), 501),
    # framing itself
    "unknown-frame-type": (encode_frame(4, 0, b""), 501),
    "bad-frame-end": (encode_frame(1, 1, b"\x00\x14\x00\x0a\x00")[:-1] + b"\x00", 501),
    "oversize": (struct.pack(">BHI", 3, 1, 131072) + b"\0" * 64, 501),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_frame_closes_its_connection_with_rabbitmqs_code_and_the_broker_serves_on(broker, case):
    frames, code = MALFORMED[case]
    bystander = pika.BlockingConnection(pika.URLParameters(broker.url))
    sock = raw_open(broker.amqp_port)
    sock.sendall(frames)
    got, text = connection_close_of(sock)
    assert (got, text.split(" - ")[0]) == (code, {501: "FRAME_ERROR", 503: "COMMAND_INVALID",
                                                   505: "UNEXPECTED_FRAME"}[code]), text
    ch = bystander.channel()  # the other connection, and new ones, are served
    q = ch.queue_declare("", exclusive=True).method.queue
    ch.basic_publish("", q, b"alive")
    assert ch.basic_get(q, auto_ack=True)[2] == b"alive"
    bystander.close()
    raw_open(broker.amqp_port).close()  # a new connection gets as far as open-ok


def drain(url: str, queue: str) -> list[bytes] | None:
    """Every message in ``queue`` in order (taken with auto-ack), or None if there is no such queue."""
    conn = pika.BlockingConnection(pika.URLParameters(url))
    try:
        ch = conn.channel()
        try:
            ch.queue_declare(queue, passive=True)
        except pika.exceptions.ChannelClosedByBroker as exc:
            assert exc.reply_code == 404
            return None
        out = []
        while (got := ch.basic_get(queue, auto_ack=True))[0] is not None:
            out.append(got[2])
        return out
    finally:
        if conn.is_open:
            conn.close()


def test_kill_9_during_a_queue_delete_storm_keeps_deleted_queues_and_their_messages_gone(broker_factory):
    """Durable queues holding persistent messages (spilled, some delivered and unacked) deleted one
    after another, and the broker killed after a random number of delete-oks: every answered delete
    stays deleted, its messages do not come back in a queue declared again under its name, and
    every queue not deleted has each of its messages once, in order."""
    env = {"HEADRACE_QUEUE_MAX_RESIDENT_MESSAGES": "64"}
    proc = broker_factory(env=env)
    names = [f"doomed-{i}" for i in range(8)]
    content = {name: [b"%s-%d" % (name.encode(), j) for j in range(300)] for name in names}
    conn = pika.BlockingConnection(pika.URLParameters(proc.url))
    ch = conn.channel()
    ch.confirm_delivery()
    bulk = conn.channel()  # not in confirm mode: publishes not waited for one by one
    for name in names:
        ch.queue_declare(name, durable=True)
        for body in content[name]:
            bulk.basic_publish("", name, body, PERSISTENT)
        ch.basic_publish("", name, b"last", PERSISTENT)  # its confirm covers the ones before it
        content[name].append(b"last")
    holder = pika.BlockingConnection(pika.URLParameters(proc.url))
    held = holder.channel()
    for name in names[::2]:
        assert held.basic_get(name)[2] == content[name][0]  # delivered, never acked
    kill_after = random.randint(1, len(names) - 2)
    deleted, in_flight = names[:kill_after], names[kill_after]
    for name in deleted:
        ch.queue_delete(name)  # answered
    bulk._impl.queue_delete(in_flight)  # noqa: SLF001 - sent, its answer not waited for
    proc.kill()
    proc = broker_factory(data_dir=proc.data_dir, env=env)
    for name in names:
        back = drain(proc.url, name)
        if name in deleted:
            assert back is None, name
        elif name == in_flight:
            assert back is None or back == content[name], (name, back and back[:3])
        else:
            assert back == content[name], (name, back and back[:3])
    conn = pika.BlockingConnection(pika.URLParameters(proc.url))
    ch = conn.channel()
    for name in deleted:  # the same name again: a new, empty queue
        assert ch.queue_declare(name, durable=True).method.message_count == 0
    conn.close()
    proc.kill()
    proc = broker_factory(data_dir=proc.data_dir, env=env)
    for name in deleted:
        assert drain(proc.url, name) == []


def test_kill_9_during_publishes_and_purges_returns_exactly_what_followed_the_last_purge(broker_factory):
    """One channel in confirm mode publishes batches of persistent messages to a durable queue and
    purges after each; killed at a random point. After the restart the queue holds exactly the
    confirmed messages published since the last answered purge, plus at most the one publish in
    flight, or nothing if the purge in flight took effect: nothing purged comes back."""
    proc = broker_factory(env={"HEADRACE_QUEUE_MAX_RESIDENT_MESSAGES": "64"})
    conn = pika.BlockingConnection(pika.URLParameters(proc.url))
    ch = conn.channel()
    ch.confirm_delivery()
    ch.queue_declare("purged-storm", durable=True)
    loose = conn.channel()._impl  # noqa: SLF001 - for the operation in flight at the kill: sent, not waited for
    kill_at = random.randint(60, 300)  # in publishes
    since_purge: list[bytes] = []
    in_flight: bytes | None = None
    purge_in_flight = False
    n = 0
    while True:
        body = b"%d" % n
        if n == kill_at:
            if n % 2:
                loose.basic_publish("", "purged-storm", body, PERSISTENT)
                in_flight = body
            else:
                loose.queue_purge("purged-storm")
                purge_in_flight = True
            break
        ch.basic_publish("", "purged-storm", body, PERSISTENT)
        since_purge.append(body)
        n += 1
        if n % 40 == 0:
            assert ch.queue_purge("purged-storm").method.message_count == len(since_purge)
            since_purge = []
    proc.kill()
    proc = broker_factory(data_dir=proc.data_dir)
    back = drain(proc.url, "purged-storm")
    allowed = [since_purge, since_purge + [in_flight]] if in_flight else [since_purge]
    if purge_in_flight:
        allowed.append([])
    assert back in allowed, (kill_at, len(since_purge), back and (back[:2], back[-2:]))


def test_sigterm_under_confirmed_load_exits_0_with_320_and_loses_nothing_confirmed(broker_factory):
    """Three publishers waiting for confirms and a consumer acking, on one durable queue, when the
    broker gets SIGTERM: every client is closed with 320 CONNECTION_FORCED, the broker exits 0
    within its grace, and after a restart every confirmed message not acked is there, once."""
    proc = broker_factory(env={"HEADRACE_QUEUE_MAX_RESIDENT_MESSAGES": "64"})
    setup = pika.BlockingConnection(pika.URLParameters(proc.url))
    setup.channel().queue_declare("loaded", durable=True)
    setup.close()
    confirmed: list[list[bytes]] = [[] for _ in range(3)]
    acked: list[bytes] = []
    closed_with: list[int] = []
    lock = threading.Lock()

    def publisher(i: int) -> None:
        conn = pika.BlockingConnection(pika.URLParameters(proc.url))
        ch = conn.channel()
        ch.confirm_delivery()
        try:
            for n in itertools.count():
                body = b"%d-%d" % (i, n)
                ch.basic_publish("", "loaded", body, PERSISTENT)
                confirmed[i].append(body)
        except pika.exceptions.ConnectionClosedByBroker as exc:
            with lock:
                closed_with.append(exc.reply_code)

    def consumer() -> None:
        conn = pika.BlockingConnection(pika.URLParameters(proc.url))
        ch = conn.channel()
        ch.basic_qos(prefetch_count=20)

        def on_message(channel: Any, method: Any, props: Any, body: bytes) -> None:
            channel.basic_ack(method.delivery_tag)
            acked.append(body)
        ch.basic_consume("loaded", on_message)
        try:
            while True:
                conn.process_data_events(time_limit=1)
        except pika.exceptions.ConnectionClosedByBroker as exc:
            with lock:
                closed_with.append(exc.reply_code)

    threads = [threading.Thread(target=publisher, args=(i,), daemon=True) for i in range(3)]
    threads.append(threading.Thread(target=consumer, daemon=True))
    for t in threads:
        t.start()
    assert wait_until(lambda: sum(map(len, confirmed)) >= 300 and len(acked) >= 50, timeout=30)
    proc.signal(signal.SIGTERM)
    assert proc.wait(20) == 0, proc.log[-3000:]
    for t in threads:
        t.join(10)
    assert closed_with == [320] * 4
    proc = broker_factory(data_dir=proc.data_dir)
    back = drain(proc.url, "loaded")
    assert back is not None and len(back) == len(set(back))
    for i in range(3):  # each publisher's messages come back in its order
        mine = [b for b in back if b.startswith(b"%d-" % i)]
        assert mine == sorted(mine, key=lambda b: int(b.split(b"-")[1]))
    missing = {b for c in confirmed for b in c} - set(acked) - set(back)
    assert not missing, sorted(missing)[:5]
