"""Stream filtering: a filtered read against an unfiltered read of the same stream, in-process,
through the broker's own read path (``StreamCursor.read`` with a ``StreamFilter``, then the exact
per-record check ``stream_filtering.filter_value`` the stream queue makes on every record read).

The stream has ``--messages`` records of ``--body`` bytes with ``--values`` distinct
``x-stream-filter-value`` headers, written by ``MirrorLog.append_rows`` in groups of ``--group``
records (one group is one chunk, as one flusher group is in the broker). ``--layout runs`` gives
each group one value (group g the value 37 g mod values) (a publisher batching by key, the case chunk filters are for); ``mixed``
draws each record's value at random (every chunk holds every value: nothing can be skipped, only
the exact check runs). The filter wants one value: 1/values of the stream.

The unfiltered read does only the cursor reads (no per-record work): the filtered one is held to
the cheapest reading of everything. Both with the segments in the page cache (just written).

    .venv/bin/python benchmarks/bench_stream_filter.py [--messages 1000000] [--group 1000]
        [--values 100] [--layout runs|mixed] [--rounds 3] [--broker]

``--broker`` measures through a real broker instead: the stream is declared, the broker stopped,
the same records written into its log, the broker started on it; then one pika consumer (prefetch
1000, multiple acks every 500) reads it from ``first`` unfiltered, and one with ``x-stream-filter``
reads the 1%, each timed from ``basic.consume`` to its last delivery.

``--write-cost`` measures what the chunk filters cost the writer instead: ``append_rows`` of
``--messages`` records (each carrying ``x-stream-filter-value``) in groups of ``--group``, without
and with their filter values, alternating, ``--rounds`` times.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pika

sys.path.insert(0, str(Path(__file__).parent))
from run import Headrace  # noqa: E402

from headrace.persistence.mirror_log import MirrorLog
from headrace.persistence.mirror_records import MirrorRow, encode_meta
from headrace.persistence.stream_filter import StreamFilter
from headrace.persistence.stream_log import StreamCursor, stream_root
from headrace.server.amqp.properties import BasicProperties, encode_properties
from headrace.server.broker.stream_filtering import filter_value


def build(data: Path, n: int, group: int, values: int, layout: str, body: int, queue: str = "s") -> None:
    rng = random.Random(1)
    props = [encode_properties(BasicProperties(headers={"x-stream-filter-value": f"v{v}"})) for v in range(values)]
    log = MirrorLog(stream_root(data), "/", queue, segment_max_bytes=64 << 20)
    log.recover()
    payload = b"x" * body
    meta = encode_meta(None, None, None, "")
    ts = int(time.time() * 1000)
    for start in range(0, n, group):
        count = min(group, n - start)
        if layout == "runs":  # each value in every values-th group: exactly 1/values of the stream
            picks = [(start // group * 37) % values] * count
        else:
            picks = [rng.randrange(values) for _ in range(count)]
        rows: list[MirrorRow] = [(ts, "rk", props[v], payload, meta) for v in picks]
        log.append_rows(rows, [b"v%d" % v for v in picks])
    log.flush()
    log.close()


def read(data: Path, n: int, wanted: StreamFilter | None) -> tuple[float, int, int]:
    """Seconds to read the whole stream, records read, records matched."""
    cursor = StreamCursor(data, "/", "s", 0, wanted)
    read_count = matched = 0
    t0 = time.perf_counter()
    while batch := cursor.read(n, 10_000, 256 << 10):
        read_count += batch.count
        if wanted is not None:
            bounds, raw = batch.scan.bounds, batch.data
            for r in range(batch.skip, batch.skip + batch.count):
                matched += wanted.matches(filter_value(raw[bounds[5 * r + 3]:bounds[5 * r + 4]]))
        else:
            matched += batch.count
    elapsed = time.perf_counter() - t0
    cursor.close()
    return elapsed, read_count, matched


def consume(port: int, queue: str, n: int, args: dict[str, object]) -> float:
    """Seconds from ``basic.consume`` to the ``n``-th delivery."""
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
    ch = conn.channel()
    ch.basic_qos(prefetch_count=1000)
    got = 0

    def on_message(chan: object, method: pika.spec.Basic.Deliver, props: object, body: bytes) -> None:
        nonlocal got
        got += 1
        if got % 500 == 0 or got == n:
            ch.basic_ack(method.delivery_tag, multiple=True)
        if got == n:
            ch.stop_consuming()

    t0 = time.perf_counter()
    ch.basic_consume(queue, on_message, arguments={"x-stream-offset": "first", **args})
    ch.start_consuming()
    elapsed = time.perf_counter() - t0
    conn.close()
    return elapsed


def broker_run(args: argparse.Namespace) -> None:
    queue = "bench-filter"
    with tempfile.TemporaryDirectory(prefix="bench-stream-filter-") as tmp:
        server = Headrace(Path(tmp))
        conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", server.port))
        conn.channel().queue_declare(queue, durable=True, arguments={"x-queue-type": "stream"})
        conn.close()
        server.stop()
        build(Path(tmp) / "headrace", args.messages, args.group, args.values, args.layout, args.body, queue)
        server = Headrace(Path(tmp))
        try:
            plain, filtered = [], []
            for _ in range(args.rounds):
                plain.append(consume(server.port, queue, args.messages, {}))
                filtered.append(consume(server.port, queue, args.messages // args.values, {"x-stream-filter": "v7"}))
        finally:
            server.stop()
        p, f = statistics.median(plain), statistics.median(filtered)
        print(f"broker, unfiltered consumer: {p:.2f} s ({args.messages / p:,.0f} msg/s)")
        print(f"broker, filtered consumer (1 value of {args.values}): {f:.3f} s")
        print(f"speed-up: {p / f:.1f}x (medians of {args.rounds})")


def write_cost(args: argparse.Namespace) -> None:
    props = encode_properties(BasicProperties(headers={"x-stream-filter-value": "v1"}))
    rows: list[MirrorRow] = [(1, "rk", props, b"x" * args.body, b"")] * args.group
    for _ in range(args.rounds):
        for with_filters in (False, True):
            with tempfile.TemporaryDirectory(prefix="bench-stream-filter-") as tmp:
                log = MirrorLog(stream_root(Path(tmp)), "/", "s")
                log.recover()
                t0 = time.perf_counter()
                for _ in range(args.messages // args.group):
                    if with_filters:
                        log.append_rows(rows, [filter_value(row[2]) for row in rows])
                    else:
                        log.append_rows(rows)
                per = (time.perf_counter() - t0) / (args.messages // args.group * args.group) * 1e6
                log.close()
            print(f"groups of {args.group}, {'with' if with_filters else 'without'} filter values: {per:.2f} us a record")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--group", type=int, default=1000)
    ap.add_argument("--values", type=int, default=100)
    ap.add_argument("--layout", choices=("runs", "mixed"), default="runs")
    ap.add_argument("--body", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--broker", action="store_true")
    ap.add_argument("--write-cost", action="store_true")
    args = ap.parse_args()
    if args.write_cost:
        write_cost(args)
        return
    if args.broker:
        broker_run(args)
        return
    with tempfile.TemporaryDirectory(prefix="bench-stream-filter-") as tmp:
        data = Path(tmp)
        t0 = time.perf_counter()
        build(data, args.messages, args.group, args.values, args.layout, args.body)
        print(f"wrote {args.messages} records ({args.layout}, groups of {args.group}, {args.values} values) "
              f"in {time.perf_counter() - t0:.1f} s")
        wanted = StreamFilter(frozenset({b"v7"}))
        plain, filtered = [], []
        for _ in range(args.rounds):
            s, count, _ = read(data, args.messages, None)
            assert count == args.messages
            plain.append(s)
            s, count, matched = read(data, args.messages, wanted)
            filtered.append(s)
        p, f = statistics.median(plain), statistics.median(filtered)
        print(f"unfiltered: {p:.3f} s ({args.messages / p / 1e6:.2f} M records/s)")
        print(f"filtered (1 value of {args.values}): {f:.3f} s, read {count} records, matched {matched}")
        print(f"speed-up: {p / f:.1f}x (medians of {args.rounds})")


if __name__ == "__main__":
    main()
