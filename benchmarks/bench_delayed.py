"""Delayed messages at scale: how late x-delayed-message deliveries come with millions scheduled,
and what the broker's memory does meanwhile.

    .venv/bin/python benchmarks/bench_delayed.py [--messages 10000000] [--wave 100000] [--probe-seconds 60]
        [--persistent]

Starts one ``headrace serve`` on loopback ports and a transient x-delayed-message exchange (direct).
Two publisher processes write --messages transient 32-byte messages through it as fast as the
broker takes them (raw basic.publish frames on a pika-opened channel: pika's own framing costs more
than the broker does); their x-delay spreads them uniformly over 1 h to 25 h, so they stay
scheduled. Then --wave more, sent one at a time with a confirm, are due 60 to 180 s after each was sent: they wait in
bucket files and cascade to memory while the rest is held, and a consumer measures each one's
lateness (arrival - due, the due time is in the body). Throughout, a probe publishes 100 messages
a second with a 1 to 5 s delay and measures theirs the same way. The broker's RSS is sampled every
second; the spill directory's size and the schedule's total come from the end of the load.
Prints one JSON object: publish rate, lateness percentiles (ms) of the wave and of the probes
during the load and while everything is held, RSS (MB) before, peak and at the end, spill bytes.

--persistent: the exchange and queues are durable and the bulk messages persistent (their Delay
records go to the message store). Once they are all held the broker is killed with SIGKILL and
started again on the same data directory: the JSON adds the restart's seconds (to listening, and
until the schedule holds them all again) and RSS after it; the wave and the probes then run
against the restarted broker, so their lateness is measured with everything recovered.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import random
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import pika
from pika import frame, spec

EX = "bench-delayed"
AUTH = ("guest", "guest")
MARK = 0x7A5A5A5A  # a placeholder x-delay value, found and patched in the encoded header frame
BODY = struct.Struct("<dd")  # due (epoch s), padding: 16 bytes, then 16 more of filler


def start_broker(data: Path) -> tuple[subprocess.Popen[bytes], int, int]:
    data.mkdir(exist_ok=True)
    ports_file = data / "ports.json"
    ports_file.unlink(missing_ok=True)  # a killed broker's
    proc = subprocess.Popen([sys.executable, "-m", "headrace", "serve", "--amqp-port", "0", "--http-port", "0",
                             "--data-dir", str(data), "--ports-file", str(ports_file)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 600  # a restart replays the whole store first
    while not ports_file.exists():
        if time.monotonic() > deadline or proc.poll() is not None:
            raise SystemExit("broker did not start")
        time.sleep(0.05)
    ports = json.loads(ports_file.read_text())
    return proc, ports["amqp"], ports["http"]


def rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:  # gone (the kill of --persistent)
        pass
    return 0.0


def frames(routing_key: str, persistent: bool) -> tuple[bytes, bytes, int]:
    """The method frame, and the header + body frames with the offsets of x-delay and of the due."""
    method = frame.Method(1, spec.Basic.Publish(exchange=EX, routing_key=routing_key)).marshal()
    props = spec.BasicProperties(headers={"x-delay": MARK}, delivery_mode=2 if persistent else None)
    header = frame.Header(1, 32, props).marshal()
    body = frame.Body(1, b"\0" * 32).marshal()
    return method, header + body, (header + body).index(struct.pack(">i", MARK))


def publisher(port: int, count: int, seed: int, persistent: bool, out: mp.Queue) -> None:
    """``count`` messages due in 1 to 25 h, framed here and written in 256 KiB sends."""
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port, "/", pika.PlainCredentials(*AUTH),
                                                             heartbeat=0))
    conn.channel()  # channel 1, used below with raw frames
    sock = conn._impl._transport._sock  # noqa: SLF001 - raw frames: pika's framing is the bottleneck
    sock.setblocking(True)  # pika's is non-blocking; nothing reads it until the end
    method, rest, delay_at = frames("bulk", persistent)
    body_at = len(rest) - 1 - 32
    rng = random.Random(seed)
    buf = bytearray()
    template = bytearray(rest)
    start = time.time()
    for i in range(count):
        now = time.time() if i % 64 == 0 else now  # noqa: F821 - set on the first iteration
        delay_ms = rng.randint(3_600_000, 90_000_000)
        struct.pack_into(">i", template, delay_at, delay_ms)
        BODY.pack_into(template, body_at, now + delay_ms / 1000, 0.0)
        buf += method
        buf += template
        if len(buf) > 256 << 10:
            sock.sendall(buf)
            buf.clear()
    sock.sendall(buf)
    out.put(("published", count, time.time() - start))
    sock.setblocking(False)
    conn.close()


def wave_publisher(port: int, count: int, persistent: bool, out: mp.Queue) -> None:
    """``count`` messages due 60 to 180 s after each is sent, one at a time with a publisher
    confirm, so the due time in its body is the broker's within one round trip (the largest is
    reported): a message waiting in a socket buffer would otherwise count as late."""
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port, "/", pika.PlainCredentials(*AUTH),
                                                             heartbeat=0))
    ch = conn.channel()
    ch.confirm_delivery()
    rng = random.Random(3)
    start, rtt = time.time(), 0.0
    for _ in range(count):
        delay_ms = rng.randint(60_000, 180_000)
        sent = time.time()
        ch.basic_publish(EX, "bulk", BODY.pack(sent + delay_ms / 1000, 0.0) + b"\0" * 16,
                         pika.BasicProperties(headers={"x-delay": delay_ms}, delivery_mode=2 if persistent else None))
        rtt = max(rtt, time.time() - sent)
    out.put(("published", count, time.time() - start, rtt))
    conn.close()


def lateness_consumer(port: int, queue: str, expected: int, deadline: float, out: mp.Queue) -> None:
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port, "/", pika.PlainCredentials(*AUTH),
                                                             heartbeat=0))
    ch = conn.channel()
    late: list[float] = []

    def on(_ch: object, _m: object, _p: object, body: bytes) -> None:
        late.append(time.time() - BODY.unpack_from(body, 0)[0])
        if len(late) >= expected:
            ch.stop_consuming()

    ch.basic_consume(queue, on, auto_ack=True)
    while len(late) < expected and time.time() < deadline:
        conn.process_data_events(0.5)
    out.put(("late", queue, late))
    conn.close()


def percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {"n": 0}
    s = sorted(values)
    pick = lambda q: round(s[min(len(s) - 1, int(q * len(s)))] * 1000, 1)  # noqa: E731
    return {"n": len(s), "p50_ms": pick(0.5), "p99_ms": pick(0.99), "max_ms": round(s[-1] * 1000, 1),
            "early": sum(1 for v in s if v < -0.005)}


def held(http: httpx.Client) -> int:
    return int(http.get(f"/api/exchanges/%2F/{EX}").json().get("messages_delayed", 0))


def bulk(amqp: int, http: httpx.Client, half: int, persistent: bool, out: mp.Queue) -> list[tuple]:
    """Two publishers' ``half`` each, until the schedule holds them all."""
    pubs = [mp.Process(target=publisher, args=(amqp, half, seed, persistent, out)) for seed in (1, 2)]
    for p in pubs:
        p.start()
    published = [out.get() for _ in pubs]
    for p in pubs:
        p.join()
    while held(http) < 2 * half:
        time.sleep(0.5)  # the broker still reading what was sent
    return published


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=10_000_000)
    ap.add_argument("--wave", type=int, default=100_000)
    ap.add_argument("--probe-seconds", type=float, default=60.0)
    ap.add_argument("--persistent", action="store_true")
    args = ap.parse_args()
    persistent = args.persistent
    with tempfile.TemporaryDirectory(prefix="bench-delayed-") as tmp:
        proc, amqp, http_port = start_broker(Path(tmp))
        http = httpx.Client(base_url=f"http://127.0.0.1:{http_port}", auth=AUTH, timeout=60)
        try:
            http.put(f"/api/exchanges/%2F/{EX}", json={"type": "x-delayed-message", "durable": persistent,
                                                      "arguments": {"x-delayed-type": "direct"}})
            for q in ("bulk", "probe"):
                http.put(f"/api/queues/%2F/{q}", json={"durable": persistent})
                http.post(f"/api/bindings/%2F/e/{EX}/q/{q}", json={"routing_key": q})
            rss = {"before_mb": rss_mb(proc.pid), "peak_mb": 0.0}
            stop = threading.Event()
            watched = [proc.pid]

            def sample() -> None:
                while not stop.is_set():
                    rss["peak_mb"] = max(rss["peak_mb"], rss_mb(watched[0]))
                    stop.wait(1.0)

            threading.Thread(target=sample, daemon=True).start()
            out: mp.Queue = mp.Queue()
            half = (args.messages - args.wave) // 2
            restart: dict[str, float] = {}
            if persistent:  # everything held first, then a kill -9 and a restart, then the rest
                t1 = time.time()
                empty, _, _ = start_broker(Path(tmp) / "empty")
                restart["empty_broker_listening_s"] = round(time.time() - t1, 1)
                empty.terminate()
                empty.wait(60)
                t0 = time.time()
                published = bulk(amqp, http, half, True, out)
                load_seconds = time.time() - t0
                rss["held_before_kill_mb"] = rss_mb(proc.pid)
                rss["peak_before_kill_mb"] = rss["peak_mb"]
                proc.kill()
                proc.wait(60)
                http.close()
                t1 = time.time()
                proc, amqp, http_port = start_broker(Path(tmp))
                watched[0] = proc.pid
                restart["listening_s"] = round(time.time() - t1, 1)
                http = httpx.Client(base_url=f"http://127.0.0.1:{http_port}", auth=AUTH, timeout=60)
                restart["recovered"] = held(http)
                restart["held_again_s"] = round(time.time() - t1, 1)
                rss["after_restart_mb"] = rss_mb(proc.pid)
                rss["peak_mb"] = 0.0
            probes: list[tuple[float, str]] = []  # (send time, phase)
            phase = ["load"]

            def probe() -> None:
                conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", amqp, "/",
                                                                         pika.PlainCredentials(*AUTH), heartbeat=0))
                ch = conn.channel()
                rng = random.Random(1)
                while not stop.is_set():
                    delay = rng.randint(1000, 5000)
                    sent = time.time()
                    ch.basic_publish(EX, "probe", BODY.pack(sent + delay / 1000, 0.0) + phase[0].encode(),
                                     pika.BasicProperties(headers={"x-delay": delay}))
                    probes.append((sent, phase[0]))
                    conn.sleep(0.01)
                conn.close()

            probe_late: list[tuple[float, str]] = []

            def probe_consumer() -> None:
                conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", amqp, "/",
                                                                         pika.PlainCredentials(*AUTH), heartbeat=0))
                ch = conn.channel()
                ch.basic_consume("probe", lambda _c, _m, _p, body: probe_late.append(
                    (time.time() - BODY.unpack_from(body, 0)[0], body[16:].decode())), auto_ack=True)
                while not stop.is_set() or len(probe_late) < len(probes):
                    conn.process_data_events(0.2)
                    if stop.is_set() and time.time() > stop_at[0] + 10:
                        break
                conn.close()

            stop_at = [float("inf")]
            threads = [threading.Thread(target=probe), threading.Thread(target=probe_consumer)]
            for t in threads:
                t.start()
            wave_consumer = mp.Process(target=lateness_consumer,
                                       args=(amqp, "bulk", args.wave, time.time() + 7200, out))
            wave_consumer.start()
            if not persistent:
                t0 = time.time()
                published = bulk(amqp, http, half, False, out)
                load_seconds = time.time() - t0
            wave_pub = mp.Process(target=wave_publisher, args=(amqp, args.wave, persistent, out))
            wave_pub.start()
            published.append(out.get())
            wave_pub.join()
            t_sched = time.perf_counter()
            sched = http.get(f"/api/exchanges/%2F/{EX}/schedule").json()
            sched_ms = (time.perf_counter() - t_sched) * 1000
            phase[0] = "held"
            rss["loaded_mb"] = rss_mb(proc.pid)
            spill = sum(p.stat().st_size for p in (Path(tmp) / "delayed").rglob("*") if p.is_file())
            store = sum(p.stat().st_size for p in (Path(tmp) / "store").rglob("*") if p.is_file())
            wave = out.get(timeout=7200)
            rss["after_wave_mb"] = rss_mb(proc.pid)
            held_until = time.time() + args.probe_seconds
            while time.time() < held_until:
                time.sleep(0.5)
            stop_at[0] = time.time()
            stop.set()
            for t in threads:
                t.join(60)
            wave_consumer.join(30)
            rss["end_mb"] = rss_mb(proc.pid)
            print(json.dumps({
                "messages": args.messages, "wave": args.wave, "persistent": persistent,
                "publish_rate_per_s": round(2 * half / load_seconds),
                "publisher_seconds": [round(p[2], 1) for p in published],
                "wave_confirm_rtt_max_ms": round(published[-1][3] * 1000, 1),
                "restart": restart,
                "scheduled_at_end_of_load": sched["messages_delayed"],
                "schedule_get_ms": round(sched_ms, 1),
                "histogram": [b["count"] for b in sched["histogram"]],
                "spill_bytes": spill, "store_bytes": store,
                "wave_lateness": percentiles(wave[2]),
                "probe_lateness_load": percentiles([v for v, p in probe_late if p == "load"]),
                "probe_lateness_held": percentiles([v for v, p in probe_late if p == "held"]),
                "probes_sent": len(probes), "probes_received": len(probe_late),
                "rss": {k: round(v, 1) for k, v in rss.items()},
                "median_probe_ms": round(statistics.median(v for v, _ in probe_late) * 1000, 1) if probe_late else None,
            }, indent=1))
        finally:
            http.close()
            proc.terminate()
            proc.wait(60)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
