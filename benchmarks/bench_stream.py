"""Stream queue figures, for headrace and (alternating, when ``rabbitmq-server`` is on PATH) a
private RabbitMQ node's streams over AMQP 0-9-1:

- publish rate: 2 pika producers with publisher confirms (a window of 2,000 unconfirmed), counted
  until the last confirm, that is until every message is in the stream's log;
- consume rate: 10 consumers (one process each, prefetch 1000, multiple acks every 100) starting
  at offsets spread over the stream (0, N/10, ..., 9N/10), each reading ``--read`` messages; and one
  consumer alone from ``first`` reading ``--single`` messages;
- the broker's RSS (sampled every 100 ms) while the 10 consumers read;
- a publisher with confirms on a classic queue (one message every 10 ms, persistent) while the 10
  consumers start far back: its publish-to-confirm latency, against the same probe with the
  broker idle. A consumer catching up must not stall other work.

    .venv/bin/python benchmarks/bench_stream.py [--messages 1000000] [--prebuilt 0] [--read 50000]
        [--single 200000] [--servers headrace,rabbitmq] [--rounds 1]

With ``PYTHONPATH=benchmarks/loop_steps LOOP_STEPS_FILE=/tmp/steps.json``, headrace also reports
the longest stretch of CPU one task step and one turn of its event loop took while the 10
consumers read (see ``benchmarks/loop_steps/sitecustomize.py``).

``--prebuilt N`` (headrace only) writes the stream's first N messages straight into its log
(the same records a publish appends) and restarts the broker on it, then publishes the rest
through AMQP: a stream of 10M messages without waiting for 10M publishes. RabbitMQ gets every
message through AMQP.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
import amqp_load  # noqa: E402
import pika  # noqa: E402
from run import Headrace, RabbitMQ, broker_pid  # noqa: E402

STREAM = "bench-stream"
PROBE = "bench-probe"
PROPS = pika.BasicProperties(delivery_mode=1)


def rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def cpu(pid: int) -> float:
    """CPU seconds (user + system) the process has used: what a phase cost the broker, whatever
    else the machine runs."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def producer(target: amqp_load.Target, body: bytes, count: int, out: mp.Queue) -> None:
    """``count`` publishes with confirms, at most ``window`` unconfirmed."""
    conn = pika.BlockingConnection(target.params)
    ch = conn.channel()
    impl = ch._impl  # noqa: SLF001 - the asynchronous channel: pipelined confirms
    acked = [0]

    def on_confirm(frame: Any) -> None:
        method = frame.method
        acked[0] = method.delivery_tag if method.multiple else acked[0] + 1

    impl.confirm_delivery(on_confirm)
    conn.process_data_events(0.5)
    sent, window = 0, 2000
    while sent < count:
        n = min(200, count - sent, window - (sent - acked[0]))
        for _ in range(n):
            impl.basic_publish("", STREAM, body, PROPS)
        sent += n
        amqp_load._flush(conn)  # noqa: SLF001
        conn.process_data_events(0 if n else 0.01)
    while acked[0] < count:
        conn.process_data_events(0.01)
    out.put(sent)
    conn.close()


def reader(target: amqp_load.Target, start: int | str, count: int, prefetch: int, out: mp.Queue) -> None:
    """``count`` deliveries from ``start``; reports (count, start time, last delivery time). Exits
    without cancelling: RabbitMQ refuses the rejects pika sends for unacked messages on cancel."""
    conn = pika.BlockingConnection(target.params)
    ch = conn.channel()
    ch.basic_qos(prefetch_count=prefetch)
    got = [0]
    t0 = time.time()

    def on_message(chan: Any, method: Any, props: Any, body: bytes) -> None:
        got[0] += 1
        if got[0] % 100 == 0:
            chan.basic_ack(method.delivery_tag, multiple=True)
        if got[0] >= count:  # stop here: pika would go on dispatching what the broker keeps sending
            out.put((got[0], t0, time.time()))
            out.close()
            out.join_thread()
            os._exit(0)

    ch.basic_consume(STREAM, on_message, arguments={"x-stream-offset": start})
    while True:
        conn.process_data_events(0.1)


def consume(target: amqp_load.Target, starts: list[int | str], count: int, prefetch: int) -> tuple[int, float]:
    out: mp.Queue = mp.Queue()
    procs = [mp.Process(target=reader, args=(target, s, count, prefetch, out)) for s in starts]
    for p in procs:
        p.start()
    results = [out.get() for _ in procs]
    for p in procs:
        p.join()
    total = sum(r[0] for r in results)
    return total, max(r[2] for r in results) - min(r[1] for r in results)


class Probe(threading.Thread):
    """Publish-to-confirm latency of a persistent publish to a classic queue, every 10 ms."""

    def __init__(self, target: amqp_load.Target) -> None:
        super().__init__(daemon=True)
        self.target = target
        self.lat: list[float] = []
        self.at: list[float] = []  # when each publish started
        self.stop = threading.Event()

    def run(self) -> None:
        conn = pika.BlockingConnection(self.target.params)
        ch = conn.channel()
        ch.queue_declare(PROBE, durable=True)
        ch.confirm_delivery()
        while not self.stop.is_set():
            t0 = time.perf_counter()
            ch.basic_publish("", PROBE, b"p", pika.BasicProperties(delivery_mode=2))
            self.lat.append(time.perf_counter() - t0)
            self.at.append(t0)
            conn.process_data_events(0.01)
        ch.queue_purge(PROBE)
        conn.close()

    def summary(self) -> str:
        lat = sorted(self.lat)
        if not lat:
            return "no samples"

        def pct(p: float) -> float:
            return lat[min(len(lat) - 1, int(p * len(lat)))] * 1000
        return f"p50 {pct(0.5):.1f} / p99 {pct(0.99):.1f} / max {lat[-1] * 1000:.1f} ms ({len(lat)} publishes)"


def probe_for(target: amqp_load.Target, seconds: float) -> Probe:
    probe = Probe(target)
    probe.start()
    time.sleep(seconds)
    probe.stop.set()
    probe.join()
    return probe


def loop_steps(kind: str, pid: int) -> dict[str, Any] | None:
    """With ``benchmarks/loop_steps`` on the broker's PYTHONPATH and ``LOOP_STEPS_FILE`` set: the
    event loop's longest task step and turn (CPU time) since the last call."""
    path = os.environ.get("LOOP_STEPS_FILE")
    if kind != "headrace" or not path:
        return None
    Path(path).unlink(missing_ok=True)
    os.kill(pid, signal.SIGUSR2)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            return json.loads(Path(path).read_text())
        except (OSError, ValueError):
            time.sleep(0.05)
    return None


def prebuild(tmp: Path, count: int, body: bytes) -> None:
    """The first ``count`` messages written straight into the declared stream's log."""
    from headrace.persistence.mirror_log import MirrorLog, MirrorRecord
    from headrace.persistence.stream_log import stream_root
    from headrace.server.net.stream_writer import DEFAULT_SEGMENT_BYTES
    log = MirrorLog(stream_root(tmp / "headrace"), "/", STREAM, segment_max_bytes=DEFAULT_SEGMENT_BYTES)
    log.recover()
    raw = b"\x10\x00\x01"  # the property bytes of PROPS (delivery_mode 1), as the producers publish
    done = 0
    while done < count:
        n = min(20_000, count - done)
        now = int(time.time() * 1000)
        log.append_many([MirrorRecord(now, STREAM, raw, body, source="") for _ in range(n)])
        log.flush(fsync=False)
        done += n
    log.flush(fsync=True)
    log.close()


def run_one(kind: str, args: argparse.Namespace) -> None:
    body = b"x" * args.size
    with tempfile.TemporaryDirectory(prefix=f"stream-{kind}-", dir=args.dir) as tmpdir:
        tmp = Path(tmpdir)
        prebuilt = args.prebuilt if kind == "headrace" else 0
        server: Any = Headrace(tmp) if kind == "headrace" else RabbitMQ(tmp)
        try:
            target = amqp_load.Target(kind, "127.0.0.1", server.port)
            conn = pika.BlockingConnection(target.params)
            conn.channel().queue_declare(STREAM, durable=True, arguments={"x-queue-type": "stream"})
            conn.close()
            if prebuilt:
                server.stop()
                t = time.perf_counter()
                prebuild(tmp, prebuilt, body)
                print(f"[{kind}] {prebuilt:,} messages written straight into the log in "
                      f"{time.perf_counter() - t:.0f} s", flush=True)
                server = Headrace(tmp)
                target = amqp_load.Target(kind, "127.0.0.1", server.port)
            pid = broker_pid(server)
            rss_start = rss(pid)
            to_publish = args.messages - prebuilt
            out: mp.Queue = mp.Queue()
            cpu0 = cpu(pid)
            t0 = time.perf_counter()
            procs = [mp.Process(target=producer, args=(target, body, n, out))
                     for n in (to_publish // 2, to_publish - to_publish // 2) if n]
            for p in procs:
                p.start()
            published = sum(out.get() for _ in procs)
            publish_s = time.perf_counter() - t0
            cpu_publish = cpu(pid) - cpu0
            for p in procs:
                p.join()
            rss_published = rss(pid)
            idle = probe_for(target, 5)
            total = args.messages
            starts: list[int | str] = ["first"] + [i * total // 10 for i in range(1, 10)]
            peak = [rss_published]
            done = threading.Event()

            def sample() -> None:
                while not done.is_set():
                    peak[0] = max(peak[0], rss(pid))
                    time.sleep(0.1)

            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            busy = Probe(target)
            busy.start()
            loop_steps(kind, pid)  # from here
            cpu0 = cpu(pid)
            delivered, consume_s = consume(target, starts, args.read, args.prefetch)
            cpu_many = cpu(pid) - cpu0
            steps = loop_steps(kind, pid)
            busy.stop.set()
            busy.join()
            if os.environ.get("BENCH_PROBE_TRACE"):
                worst = sorted(zip(busy.lat, busy.at), reverse=True)[:5]
                print("worst probe publishes (latency ms, s after the readers started):",
                      [(round(lat * 1000), round(at - busy.at[0], 1)) for lat, at in worst], flush=True)
            done.set()
            cpu0 = cpu(pid)
            single, single_s = consume(target, ["first"], args.single, args.prefetch)
            cpu_single = cpu(pid) - cpu0
            disk = sum(f.stat().st_size for f in tmp.rglob("*") if f.is_file() and "stream" in str(f))
            print(f"[{kind}] stream of {total:,} messages of {args.size} B ({disk / 1e6:,.0f} MB of stream files)")
            if published:
                print(f"[{kind}] publish (2 producers, confirms): {published:,} in {publish_s:.1f} s = "
                      f"{published / publish_s:,.0f} msg/s, broker CPU {cpu_publish / published * 1e6:.0f} us/message")
            print(f"[{kind}] consume, 10 consumers at first, {total // 10:,} .. {9 * total // 10:,}: "
                  f"{delivered:,} in {consume_s:.1f} s = {delivered / consume_s:,.0f} msg/s, "
                  f"broker CPU {cpu_many / delivered * 1e6:.0f} us/delivery")
            print(f"[{kind}] consume, 1 consumer from first: {single:,} in {single_s:.1f} s = "
                  f"{single / single_s:,.0f} msg/s, broker CPU {cpu_single / single * 1e6:.0f} us/delivery")
            print(f"[{kind}] RSS: start {rss_start / 1e6:.0f} MB, after publish {rss_published / 1e6:.0f} MB, "
                  f"peak while 10 consumers read {peak[0] / 1e6:.0f} MB")
            print(f"[{kind}] classic-queue publish-to-confirm: idle {idle.summary()}; "
                  f"while 10 consumers read {busy.summary()}", flush=True)
            if steps:
                print(f"[{kind}] event loop while 10 consumers read: longest task step {steps['step_max_ms']:.1f} ms "
                      f"CPU ({steps['step_max_task']}), longest turn {steps['turn_max_ms']:.1f} ms CPU, "
                      f"steps over 5/20/50 ms: {steps['steps_over_ms']['5']}/{steps['steps_over_ms']['20']}/"
                      f"{steps['steps_over_ms']['50']} of {steps['steps']:,}; without garbage collections the "
                      f"longest step {steps['step_max_without_gc_ms']:.1f} ms, longest collection "
                      f"{steps['gc_max_ms']:.1f} ms", flush=True)
        finally:
            server.stop()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--prebuilt", type=int, default=0, help="headrace: messages written straight into the log")
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--read", type=int, default=50_000, help="messages each of the 10 consumers reads")
    ap.add_argument("--single", type=int, default=200_000, help="messages one consumer reads from first")
    ap.add_argument("--prefetch", type=int, default=1000)
    ap.add_argument("--servers", default="headrace,rabbitmq" if shutil.which("rabbitmq-server") else "headrace")
    ap.add_argument("--rounds", type=int, default=1, help="alternate the servers this many times")
    ap.add_argument("--dir", default=None, help="where the brokers' data go (default: the temp dir)")
    args = ap.parse_args()
    for _ in range(args.rounds):
        for kind in args.servers.split(","):
            run_one(kind, args)


if __name__ == "__main__":
    main()
