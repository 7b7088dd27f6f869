"""Publishing into a 4-partition super stream against a single stream: throughput and broker CPU.

    .venv/bin/python benchmarks/bench_super_stream.py [--messages 200000] [--partitions 4]
        [--keys 1000] [--rounds 2]

A fresh headrace broker per run (``run.Headrace``). ``single``: one stream, published to through
the default exchange. ``super``: a super stream of ``--partitions`` partitions made by
``PUT /api/super-streams``, published to through its exchange with routing keys cycling over
``--keys`` keys (``customer-<i>``), so the exchange hashes each key (MurmurHash3, cached per key)
and the messages spread over the partitions. Both: 2 pika producers with publisher confirms (a
window of 2,000 unconfirmed, as ``bench_stream.py``), 256-byte bodies, timed until the last
confirm, that is until every message is in its log; the broker's CPU (user + system from
``/proc``) over the same span. The modes alternate for ``--rounds``. One JSON line per run.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
import amqp_load  # noqa: E402
import httpx  # noqa: E402
import pika  # noqa: E402
from run import Headrace, broker_pid  # noqa: E402

PROPS = pika.BasicProperties(delivery_mode=1)


def cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def producer(target: amqp_load.Target, exchange: str, keys: list[str], first: int, count: int,
             out: mp.Queue) -> None:
    """``count`` publishes with confirms, at most 2,000 unconfirmed; keys from index ``first`` on."""
    conn = pika.BlockingConnection(target.params)
    ch = conn.channel()
    impl = ch._impl  # noqa: SLF001 - the asynchronous channel: pipelined confirms
    acked = [0]

    def on_confirm(frame: Any) -> None:
        method = frame.method
        acked[0] = method.delivery_tag if method.multiple else acked[0] + 1

    impl.confirm_delivery(on_confirm)
    conn.process_data_events(0.5)
    body = b"x" * 256
    n_keys = len(keys)
    sent, window = 0, 2000
    while sent < count:
        n = min(200, count - sent, window - (sent - acked[0]))
        for i in range(sent, sent + n):
            impl.basic_publish(exchange, keys[(first + i) % n_keys], body, PROPS)
        sent += n
        amqp_load._flush(conn)  # noqa: SLF001
        conn.process_data_events(0 if n else 0.01)
    while acked[0] < count:
        conn.process_data_events(0.01)
    out.put(sent)
    conn.close()


def run_one(mode: str, args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix=f"superstream-{mode}-") as tmpdir:
        server = Headrace(Path(tmpdir))
        try:
            target = amqp_load.Target("headrace", "127.0.0.1", server.port)
            if mode == "single":
                conn = pika.BlockingConnection(target.params)
                conn.channel().queue_declare("bench-single", durable=True, arguments={"x-queue-type": "stream"})
                conn.close()
                exchange, keys = "", ["bench-single"]
            else:
                with httpx.Client(base_url=f"http://127.0.0.1:{server.http_port}", auth=("guest", "guest")) as http:
                    r = http.put("/api/super-streams/%2F/bench-super", json={"partitions": args.partitions})
                    assert r.status_code == 201, r.text
                exchange, keys = "bench-super", [f"customer-{i}" for i in range(args.keys)]
            pid = broker_pid(server)
            out: mp.Queue = mp.Queue()
            half = args.messages // 2
            cpu0 = cpu(pid)
            t0 = time.perf_counter()
            procs = [mp.Process(target=producer, args=(target, exchange, keys, first, n, out))
                     for first, n in ((0, half), (half, args.messages - half))]
            for p in procs:
                p.start()
            published = sum(out.get() for _ in procs)
            seconds = time.perf_counter() - t0
            broker_cpu = cpu(pid) - cpu0
            for p in procs:
                p.join()
            return {"mode": mode, "partitions": args.partitions if mode == "super" else 1, "messages": published,
                    "msg_per_s": round(published / seconds), "broker_cpu_us_per_msg": round(broker_cpu / published * 1e6, 1),
                    "load_1m": os.getloadavg()[0]}
        finally:
            server.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--keys", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    for _ in range(args.rounds):
        for mode in ("single", "super"):
            print(json.dumps(run_one(mode, args)), flush=True)


if __name__ == "__main__":
    main()
