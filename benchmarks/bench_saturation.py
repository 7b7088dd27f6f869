"""Saturated pubsub under different socket and gate settings, alternating in one run.

    .venv/bin/python benchmarks/bench_saturation.py [--rounds 3] [--scenarios saturated,pubsub,publish-only]

Each round starts a fresh broker per configuration (the order flipped every round, so a change of
machine load hits both sides alike) and runs the scenarios of ``run.py`` against it. ``defaults``
is server/config.py's (Linux's autotuned socket buffers, 64 KiB segments on loopback, gate bounds
1000/250); ``held`` the held profile (1448-byte segments, an autotuned window until a saturated
queue first holds the connection, then 8 KiB, gate bounds 500/150); ``profile`` the latency
profile (8 KiB receive buffers on every loopback or LAN connection from its accept). Earlier runs in RESULTS.md
called the defaults ``before`` (or ``autotuned``) and the latency profile ``after``. ``publish-only``
is two pipelined pika publishers into a queue
without consumers (it must not be gated). During ``saturated`` ``ss`` is sampled every 50 ms for
where the messages wait: the largest client send buffer (``skmem`` tb), and the clients' send
queues and the broker's receive queues on its port (the largest sample, and the median of each
sample's largest). The configuration ``rabbitmq`` runs the same against RabbitMQ (when installed)
instead of headrace. Prints one JSON line per run.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
import amqp_load  # noqa: E402
import run  # noqa: E402

CONFIGS: dict[str, dict[str, str]] = {
    # the defaults: autotuned windows, the route's MSS, gate bounds 1000/250
    "defaults": {},
    # the held profile: a small window for a connection once a saturated queue holds it
    "held": {"HEADRACE_AMQP_MSS": "1448", "HEADRACE_AMQP_HELD_RCVBUF": "8192", "HEADRACE_SATURATION_READY": "500",
             "HEADRACE_SATURATION_RESUME_READY": "150"},
    # the latency profile: a small window on every connection from its accept (but a long link's)
    "profile": {"HEADRACE_AMQP_RCVBUF": "8192", "HEADRACE_AMQP_MSS": "1448", "HEADRACE_SATURATION_READY": "500",
                "HEADRACE_SATURATION_RESUME_READY": "150"},
}


def settings_env(spec: str) -> dict[str, str]:
    """``amqp_rcvbuf=32768+amqp_mss=1448+saturation_ready=800`` -> the broker's environment for those settings."""
    pairs = (item.split("=", 1) for item in spec.split("+"))
    return {f"HEADRACE_{key.upper()}": value for key, value in pairs}


def publish_only(target: amqp_load.Target, count: int = 60_000, producers: int = 2) -> dict[str, Any]:
    conn, ch = amqp_load._admin(target)  # noqa: SLF001
    queue = f"bench-pubonly-{uuid.uuid4().hex[:8]}"
    ch.queue_declare(queue)
    out: mp.Queue = mp.Queue()
    prods = [mp.Process(target=amqp_load.producer, args=(target, "", [queue], b"x" * 128, count // producers,
                                                         False, False, 0, out)) for _ in range(producers)]
    start = time.perf_counter()
    amqp_load._run(prods)  # noqa: SLF001
    amqp_load._collect(out, producers, 120)  # noqa: SLF001
    wall = time.perf_counter() - start
    amqp_load._join(prods)  # noqa: SLF001
    queued = ch.queue_declare(queue, passive=True).method.message_count
    ch.queue_delete(queue)
    conn.close()
    return {"rate": queued / wall, "queued": queued}


def sample_tcp(port: int, stop: threading.Event, seen: dict[str, int]) -> None:
    """Largest client send buffer / send queue and broker receive queue on ``port`` until ``stop``,
    and the medians over the samples (each sample's largest send and receive queue)."""
    send_qs: list[int] = []
    recv_qs: list[int] = []
    while not stop.is_set():
        lines = subprocess.run(["ss", "-tnmi", f"( sport = :{port} or dport = :{port} )"],
                               capture_output=True, text=True).stdout.splitlines()[1:]
        send_q = recv_q = 0
        for i, line in enumerate(lines):
            parts = line.split()
            if len(parts) < 5 or parts[0] != "ESTAB":
                continue
            info = lines[i + 1] if i + 1 < len(lines) else ""
            if parts[3].endswith(f":{port}"):
                recv_q = max(recv_q, int(parts[1]))
            else:
                send_q = max(send_q, int(parts[2]))
                found = re.search(r"tb(\d+)", info)
                if found:
                    seen["client_sndbuf"] = max(seen.get("client_sndbuf", 0), int(found.group(1)))
        send_qs.append(send_q)
        recv_qs.append(recv_q)
        seen["client_send_q"] = max(send_qs)
        seen["broker_recv_q"] = max(recv_qs)
        seen["client_send_q_p50"] = round(statistics.median(send_qs))
        seen["broker_recv_q_p50"] = round(statistics.median(recv_qs))
        time.sleep(0.05)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--scenarios", default="saturated,pubsub,publish-only")
    ap.add_argument("--configs", default="defaults,held,profile",
                    help="defaults, held, profile, rabbitmq, or settings joined by '+', e.g. "
                         "amqp_rcvbuf=32768+amqp_mss=1448")
    args = ap.parse_args()
    names = args.configs.split(",")
    for rnd in range(args.rounds):
        for name in names if rnd % 2 == 0 else names[::-1]:
            with tempfile.TemporaryDirectory() as tmp:
                broker: run.Headrace | run.RabbitMQ
                if name == "rabbitmq":
                    broker = run.RabbitMQ(Path(tmp))
                else:
                    broker = run.Headrace(Path(tmp), CONFIGS[name] if name in CONFIGS else settings_env(name))
                try:
                    target = amqp_load.Target(broker.name, "127.0.0.1", broker.port)
                    for scenario in args.scenarios.split(","):
                        load = os.getloadavg()[0]
                        seen: dict[str, int] = {}
                        stop = threading.Event()
                        sampler = threading.Thread(target=sample_tcp, args=(broker.port, stop, seen))
                        if scenario == "saturated":
                            sampler.start()
                        if scenario == "publish-only":
                            result = publish_only(target)
                        else:
                            result = run.run_scenario(scenario, broker, False)
                        stop.set()
                        if sampler.is_alive():
                            sampler.join()
                        keep = {k: round(v) for k, v in result.items()
                                if k in ("rate", "publish_rate", "p50_ms", "p99_ms", "peak_ready")}
                        print(json.dumps({"round": rnd + 1, "config": name, "scenario": scenario,
                                          "load1": round(load, 1), **keep, **seen}), flush=True)
                finally:
                    broker.stop()


if __name__ == "__main__":
    main()
