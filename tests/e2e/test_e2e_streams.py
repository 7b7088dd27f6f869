"""Stream queues (x-queue-type: stream) through pika: declare rules, offsets, retention, tracking."""

from __future__ import annotations

import datetime
import json
import time
import urllib.request
from pathlib import Path

import pika
import pika.exceptions
import pytest
from e2e_support import unique, wait_until

pytestmark = pytest.mark.timeout(120)


def connect(broker) -> tuple[pika.BlockingConnection, pika.adapters.blocking_connection.BlockingChannel]:
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    return conn, conn.channel()


def declare_stream(ch, name: str, **args: object) -> None:
    ch.queue_declare(name, durable=True, arguments={"x-queue-type": "stream", **args})


def publish(ch, name: str, bodies: list[bytes], **props: object) -> None:
    ch.confirm_delivery()
    for body in bodies:
        ch.basic_publish("", name, body, pika.BasicProperties(**props))


def consume(conn, ch, name: str, count: int, args: dict | None = None, prefetch: int = 10,
            ack: bool = True, timeout: float = 10.0, tag: str | None = None) -> list[tuple[int, bytes]]:
    """``count`` deliveries from the stream as (x-stream-offset header, body), acked one by one."""
    got: list[tuple[int, bytes]] = []
    ch.basic_qos(prefetch_count=prefetch)

    def on_message(chan, method, props, body):
        got.append((props.headers["x-stream-offset"], body))
        if ack:
            chan.basic_ack(method.delivery_tag)

    ctag = ch.basic_consume(name, on_message, arguments=args or {}, consumer_tag=tag)
    assert wait_until(lambda: len(got) >= count, conn, timeout), got
    ch.basic_cancel(ctag)
    return got


def channel_error(broker, action) -> tuple[int, str]:
    conn, ch = connect(broker)
    try:
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            action(ch)
        return info.value.reply_code, info.value.reply_text
    finally:
        if conn.is_open:
            conn.close()


# ---------------------------------------------------------------- declare rules

def test_stream_must_be_durable_not_exclusive_not_auto_delete(broker):
    name = unique("s")
    rs = f"queue '{name}' in vhost '/'"
    assert channel_error(broker, lambda ch: ch.queue_declare(
        name, durable=False, arguments={"x-queue-type": "stream"})) == (
        406, f"PRECONDITION_FAILED - invalid property 'non-durable' for {rs}")
    assert channel_error(broker, lambda ch: ch.queue_declare(
        name, durable=True, exclusive=True, arguments={"x-queue-type": "stream"})) == (
        406, f"PRECONDITION_FAILED - invalid property 'exclusive-owner' for {rs}")
    assert channel_error(broker, lambda ch: ch.queue_declare(
        name, durable=True, auto_delete=True, arguments={"x-queue-type": "stream"})) == (
        406, f"PRECONDITION_FAILED - invalid property 'auto-delete' for {rs}")


@pytest.mark.parametrize("arg,value", [("x-message-ttl", 1000), ("x-max-length", 10),
                                       ("x-dead-letter-exchange", "dlx"), ("x-max-priority", 5),
                                       ("x-overflow", "reject-publish"), ("x-expires", 1000)])
def test_stream_refuses_queue_arguments(broker, arg, value):
    name = unique("s")
    code, text = channel_error(broker, lambda ch: declare_stream(ch, name, **{arg: value}))
    assert (code, text) == (406, f"PRECONDITION_FAILED - invalid arg '{arg}' for queue '{name}' in vhost '/' "
                                 "of queue type rabbit_stream_queue")


def test_stream_accepts_retention_arguments_and_refuses_bad_max_age(broker):
    conn, ch = connect(broker)
    declare_stream(ch, unique("s"), **{"x-max-length-bytes": 1 << 20, "x-max-age": "7D",
                                       "x-stream-max-segment-size-bytes": 1 << 16})
    declare_stream(ch, unique("s"), **{"x-max-age": "12h"})
    conn.close()
    code, text = channel_error(broker, lambda ch: declare_stream(ch, unique("s"), **{"x-max-age": "7 days"}))
    assert code == 406 and "invalid arg 'x-max-age'" in text


def test_unknown_queue_type_refused(broker):
    code, text = channel_error(broker, lambda ch: ch.queue_declare(
        unique("q"), durable=True, arguments={"x-queue-type": "lazy"}))
    assert code == 406 and "x-queue-type" in text


# ---------------------------------------------------------------- consumer refusals

def test_basic_get_on_stream_is_not_implemented(broker):
    name = unique("s")
    conn, ch = connect(broker)
    declare_stream(ch, name)
    conn.close()
    assert channel_error(broker, lambda ch: ch.basic_get(name)) == (
        540, f"NOT_IMPLEMENTED - basic.get not supported by stream queues queue '{name}' in vhost '/'")


def test_consumer_without_prefetch_or_with_auto_ack_refused(broker):
    name = unique("s")
    conn, ch = connect(broker)
    declare_stream(ch, name)
    conn.close()

    def no_prefetch(ch):
        ch.basic_consume(name, lambda *a: None)
        ch.connection.process_data_events(time_limit=1)
        ch.basic_qos(prefetch_count=1)  # forces a round trip if the consume slipped through

    assert channel_error(broker, no_prefetch) == (
        406, f"PRECONDITION_FAILED - consumer prefetch count is not set for stream queue '{name}' in vhost '/'")

    def auto_ack(ch):
        ch.basic_qos(prefetch_count=10)
        ch.basic_consume(name, lambda *a: None, auto_ack=True)
        ch.connection.process_data_events(time_limit=1)
        ch.basic_qos(prefetch_count=1)

    assert channel_error(broker, auto_ack) == (
        540, f"NOT_IMPLEMENTED - automatic acknowledgement not supported by stream queues queue '{name}' "
             "in vhost '/'")

    def auto_ack_without_prefetch(ch):  # RabbitMQ answers the missing prefetch first
        ch.basic_consume(name, lambda *a: None, auto_ack=True)
        ch.connection.process_data_events(time_limit=1)
        ch.basic_qos(prefetch_count=1)

    assert channel_error(broker, auto_ack_without_prefetch) == (
        406, f"PRECONDITION_FAILED - consumer prefetch count is not set for stream queue '{name}' in vhost '/'")


# ---------------------------------------------------------------- offsets

def test_every_offset_form(broker):
    name = unique("s")
    conn, ch = connect(broker)
    declare_stream(ch, name)
    publish(ch, name, [f"m{i}".encode() for i in range(10)])
    everything = consume(conn, ch, name, 10, {"x-stream-offset": "first"})
    assert everything == [(i, f"m{i}".encode()) for i in range(10)]
    assert consume(conn, ch, name, 6, {"x-stream-offset": 4}) == [(i, f"m{i}".encode()) for i in range(4, 10)]
    assert consume(conn, ch, name, 1, {"x-stream-offset": "last"}) == [(9, b"m9")]
    # an AMQP timestamp before every message, and an interval reaching back an hour
    past = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=5)
    assert [o for o, _ in consume(conn, ch, name, 10, {"x-stream-offset": past})] == list(range(10))
    assert [o for o, _ in consume(conn, ch, name, 10, {"x-stream-offset": "1h"})] == list(range(10))
    # a timestamp after every message: only what comes next, as with "next" and the default
    future = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(minutes=5)
    for args in ({"x-stream-offset": "next"}, {}, {"x-stream-offset": future}):
        got: list[int] = []
        ch.basic_qos(prefetch_count=10)
        ctag = ch.basic_consume(name, lambda c, m, p, b: (got.append(p.headers["x-stream-offset"]),
                                                           c.basic_ack(m.delivery_tag)), arguments=args)
        conn.process_data_events(time_limit=0.3)
        assert got == []
        pub = conn.channel()
        pub.confirm_delivery()
        pub.basic_publish("", name, b"later")
        assert wait_until(lambda: len(got) == 1, conn), got
        pub.close()
        ch.basic_cancel(ctag)
    conn.close()


def test_many_consumers_read_independently_and_nothing_is_removed(broker):
    name = unique("s")
    conn, ch = connect(broker)
    declare_stream(ch, name)
    publish(ch, name, [str(i).encode() for i in range(200)])
    results: dict[str, list[int]] = {"a": [], "b": [], "c": []}
    starts = {"a": "first", "b": 50, "c": 150}
    ch.basic_qos(prefetch_count=7)
    for key, start in starts.items():
        ch.basic_consume(name, lambda c, m, p, b, key=key: (results[key].append(p.headers["x-stream-offset"]),
                                                            c.basic_ack(m.delivery_tag)),
                         arguments={"x-stream-offset": start})
    assert wait_until(lambda: sum(map(len, results.values())) == 200 + 150 + 50, conn, 15)
    assert results == {"a": list(range(200)), "b": list(range(50, 200)), "c": list(range(150, 200))}
    assert ch.queue_declare(name, durable=True, passive=True).method.message_count == 200
    conn.close()


def test_unacked_consumer_is_held_at_prefetch_and_does_not_hold_others(broker):
    name = unique("s")
    conn, ch = connect(broker)
    declare_stream(ch, name)
    publish(ch, name, [b"x"] * 50)
    slow: list[int] = []
    fast: list[int] = []
    ch.basic_qos(prefetch_count=5)
    ch.basic_consume(name, lambda c, m, p, b: slow.append(m.delivery_tag), arguments={"x-stream-offset": "first"})
    ch.basic_consume(name, lambda c, m, p, b: (fast.append(1), c.basic_ack(m.delivery_tag)),
                     arguments={"x-stream-offset": "first"})
    assert wait_until(lambda: len(fast) == 50, conn, 10)
    conn.process_data_events(time_limit=0.2)
    assert len(slow) == 5  # credit only, never more than the prefetch unacked
    conn.close()


def test_confirmed_publish_through_exchange_to_stream_and_classic(broker):
    name = unique("s")
    classic = unique("q")
    exchange = unique("x")
    conn, ch = connect(broker)
    declare_stream(ch, name)
    ch.queue_declare(classic)
    ch.exchange_declare(exchange, "fanout")
    ch.queue_bind(name, exchange)
    ch.queue_bind(classic, exchange)
    ch.confirm_delivery()
    for i in range(20):
        ch.basic_publish(exchange, "rk", f"{i}".encode(), pika.BasicProperties(content_type="text/plain"))
    assert ch.queue_declare(classic, passive=True).method.message_count == 20
    got: list = []
    ch.basic_qos(prefetch_count=50)
    ch.basic_consume(name, lambda c, m, p, b: (got.append((m.exchange, m.routing_key, p.content_type, b)),
                                               c.basic_ack(m.delivery_tag)),
                     arguments={"x-stream-offset": "first"})
    assert wait_until(lambda: len(got) == 20, conn)
    assert got[3] == (exchange, "rk", "text/plain", b"3")
    conn.close()


# ---------------------------------------------------------------- server-side offset tracking

def test_named_consumer_resumes_after_reconnect_and_restart(broker_factory, tmp_path: Path):
    proc = broker_factory()
    name = unique("s")
    conn, ch = connect(proc)
    declare_stream(ch, name)
    publish(ch, name, [str(i).encode() for i in range(30)])
    named = {"x-stream-offset": "next", "x-stream-consumer-name": "billing"}
    first = consume(conn, ch, name, 10, {"x-stream-offset": "first", "x-stream-consumer-name": "billing"},
                    prefetch=1)
    assert [o for o, _ in first[:10]] == list(range(10))
    acked_to = first[-1][0]
    conn.close()
    conn, ch = connect(proc)
    again = consume(conn, ch, name, 5, named, prefetch=1)
    assert again[0][0] == acked_to + 1
    last = again[-1][0]
    # LavinMQ's convention: the consumer tag names the tracked consumer
    lavin = consume(conn, ch, name, 3, {"x-stream-automatic-offset-tracking": True, "x-stream-offset": "first"},
                    prefetch=1, tag="lavin-tag")
    assert lavin[0][0] == 0
    conn.close()
    assert proc.stop() == 0
    proc = broker_factory(data_dir=proc.data_dir)  # a new process object: its own readiness signal
    conn, ch = connect(proc)
    resumed = consume(conn, ch, name, 5, named, prefetch=1)
    assert resumed[0][0] == last + 1
    lavin = consume(conn, ch, name, 1, {"x-stream-automatic-offset-tracking": True}, prefetch=1, tag="lavin-tag")
    assert lavin[0][0] >= 3
    # an unnamed consumer is not tracked: "next" is the end of the stream
    pub = conn.channel()
    publish(pub, name, [b"tail"])
    conn.close()


# ---------------------------------------------------------------- retention

def test_retention_by_bytes_drops_whole_old_segments(broker):
    name = unique("s")
    conn, ch = connect(broker)
    declare_stream(ch, name, **{"x-max-length-bytes": 20_000, "x-stream-max-segment-size-bytes": 4000})
    publish(ch, name, [b"x" * 500 for _ in range(200)])  # ~100 KB
    got = consume(conn, ch, name, 1, {"x-stream-offset": "first"})
    assert got[0][0] > 100  # the oldest segments are gone; the first offset moved on
    count = ch.queue_declare(name, durable=True, passive=True).method.message_count
    assert 20 <= count < 80
    conn.close()


def test_retention_by_age(broker_factory):
    proc = broker_factory(env={"HEADRACE_MIRROR_RETENTION_INTERVAL": "0.2"})
    name = unique("s")
    conn, ch = connect(proc)
    declare_stream(ch, name, **{"x-max-age": "1s", "x-stream-max-segment-size-bytes": 2000})
    publish(ch, name, [b"y" * 500 for _ in range(20)])
    time.sleep(1.2)  # the messages must be older than x-max-age: this waits out real time, not state
    publish(ch, name, [b"z" * 500 for _ in range(5)])

    def first_offset() -> int:
        return ch.queue_declare(name, durable=True, passive=True).method.message_count

    assert wait_until(lambda: first_offset() <= 10, conn, 10)
    got = consume(conn, ch, name, 1, {"x-stream-offset": "first"})
    assert got[0][0] >= 15
    conn.close()


# ---------------------------------------------------------------- quorum

def test_quorum_rules_and_delivery_count(broker):
    rs = "queue '{}' in vhost '/'"
    name = unique("qq")
    assert channel_error(broker, lambda ch: ch.queue_declare(name, arguments={"x-queue-type": "quorum"})) == (
        406, f"PRECONDITION_FAILED - invalid property 'non-durable' for {rs.format(name)}")
    assert channel_error(broker, lambda ch: ch.queue_declare(
        name, durable=True, arguments={"x-queue-type": "quorum", "x-max-priority": 3}))[0] == 406
    conn, ch = connect(broker)
    ch.queue_declare(name, durable=True, arguments={"x-queue-type": "quorum", "x-delivery-limit": 2})
    ch.basic_publish("", name, b"q")
    counts: list = []
    ch.basic_qos(prefetch_count=1)
    ch.basic_consume(name, lambda c, m, p, b: (counts.append((p.headers or {}).get("x-delivery-count")),
                                               c.basic_nack(m.delivery_tag, requeue=True)))
    assert wait_until(lambda: len(counts) == 3, conn)
    assert counts == [None, 1, 2]  # then past the limit: dropped
    conn.process_data_events(time_limit=0.2)
    assert len(counts) == 3
    conn.close()


def http_json(broker, path: str) -> dict:
    req = urllib.request.Request(broker.http_url + path)
    req.add_header("Authorization", "Basic Z3Vlc3Q6Z3Vlc3Q=")
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.load(resp)


# ---------------------------------------------------------------- kill -9

def test_confirmed_messages_survive_kill_9_with_contiguous_offsets(broker_factory):
    import threading

    proc = broker_factory()
    name = unique("s")
    conn, ch = connect(proc)
    declare_stream(ch, name, **{"x-stream-max-segment-size-bytes": 20_000})
    conn.close()
    confirmed: list[bytes] = []
    enough = threading.Event()

    def publisher() -> None:
        try:
            c = pika.BlockingConnection(pika.URLParameters(proc.url))
            chan = c.channel()
            chan.confirm_delivery()
            i = 0
            while True:
                body = f"m{i}".encode() * 20
                chan.basic_publish("", name, body)
                confirmed.append(body)
                i += 1
                if i >= 300:
                    enough.set()
        except (pika.exceptions.AMQPError, OSError):
            return

    thread = threading.Thread(target=publisher, daemon=True)
    thread.start()
    assert enough.wait(60)
    proc.kill()
    thread.join(10)
    proc = broker_factory(data_dir=proc.data_dir)
    conn, ch = connect(proc)
    count = ch.queue_declare(name, durable=True, passive=True).method.message_count
    assert count >= len(confirmed)
    got = consume(conn, ch, name, count, {"x-stream-offset": "first"}, prefetch=500, timeout=30)
    offsets = [o for o, _ in got]
    assert offsets == list(range(count))  # unique and contiguous
    bodies = [b for _, b in got]
    assert bodies[:len(confirmed)] == confirmed  # every confirmed message, in order
    # the log goes on from where it was cut
    publish(ch, name, [b"after"])
    assert consume(conn, ch, name, 1, {"x-stream-offset": "last"}) == [(count, b"after")]
    conn.close()


# ---------------------------------------------------------------- HTTP, CLI, metrics

def test_http_cli_and_metrics_show_stream_offsets_and_lag(broker_factory):
    import subprocess
    import sys

    proc = broker_factory(env={"HEADRACE_METRICS": "per-queue"})
    name = unique("s")
    conn, ch = connect(proc)
    declare_stream(ch, name)
    publish(ch, name, [b"a" * 100 for _ in range(40)])
    got: list[int] = []
    ch.basic_qos(prefetch_count=10)
    ch.basic_consume(name, lambda c, m, p, b: got.append(m.delivery_tag), arguments={"x-stream-offset": 25},
                     consumer_tag="reader-1")
    assert wait_until(lambda: len(got) == 10, conn)
    info = http_json(proc, f"/api/queues/%2F/{name}")
    assert info["type"] == "stream" and info["messages"] == 40
    stream = info["stream"]
    assert stream["first_offset"] == 0 and stream["last_offset"] == 39 and stream["size_on_disk"] > 4000
    assert stream["first_timestamp"] <= stream["last_timestamp"]
    assert stream["consumers"] == [{"consumer_tag": "reader-1", "name": None, "offset": 35, "lag": 5,
                                    "single_active_group": None, "active": True}]
    with urllib.request.urlopen(proc.http_url + "/metrics", timeout=10) as resp:
        metrics = resp.read().decode()
    assert f'headrace_stream_consumer_lag{{vhost="/",queue="{name}",consumer="reader-1"}} 5' in metrics
    out = subprocess.run([sys.executable, "-m", "headrace", "queue", "stream", name, "--url", proc.http_url,
                          "--json"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["consumers"][0]["lag"] == 5
    out = subprocess.run([sys.executable, "-m", "headrace", "queue", "stream", "amq.nope", "--url",
                          proc.http_url], capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and "amq.nope" in out.stderr
    conn.close()


# ---------------------------------------------------------------- aio-pika

def test_aio_pika_stream_offsets_and_named_resume(broker):
    import asyncio

    import aio_pika

    name = unique("s")

    async def read(channel, count: int, args: dict) -> list[tuple[int, bytes]]:
        queue = await channel.get_queue(name, ensure=False)
        got: list[tuple[int, bytes]] = []
        done = asyncio.Event()

        async def on_message(message: aio_pika.abc.AbstractIncomingMessage) -> None:
            got.append((message.headers["x-stream-offset"], message.body))
            await message.ack()
            if len(got) >= count:
                done.set()

        tag = await queue.consume(on_message, arguments=args)
        await asyncio.wait_for(done.wait(), 15)
        await queue.cancel(tag)
        return got

    async def main() -> tuple[list, list, list]:
        conn = await aio_pika.connect_robust(broker.url)
        async with conn:
            channel = await conn.channel(publisher_confirms=True)
            await channel.set_qos(prefetch_count=3)
            await channel.declare_queue(name, durable=True, arguments={"x-queue-type": "stream"})
            for i in range(12):
                await channel.default_exchange.publish(aio_pika.Message(b"a%d" % i), routing_key=name)
            first = await read(channel, 12, {"x-stream-offset": "first"})
            named = await read(channel, 4, {"x-stream-offset": 2, "x-stream-consumer-name": "aio"})
            for i in range(12, 14):  # the named consumer may have read (and acked) to the end
                await channel.default_exchange.publish(aio_pika.Message(b"a%d" % i), routing_key=name)
            resumed = await read(channel, 2, {"x-stream-consumer-name": "aio"})
            return first, named, resumed

    first, named, resumed = asyncio.run(asyncio.wait_for(main(), 60))
    assert first == [(i, b"a%d" % i) for i in range(12)]
    assert [o for o, _ in named[:4]] == [2, 3, 4, 5]
    assert resumed[0][0] == named[-1][0] + 1  # after the last offset it acked
