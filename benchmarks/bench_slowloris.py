"""Real clients through a socket flood: how many pika connects get in while idle and slowloris
sockets hold the broker's handshake bound, reopening each one the moment it is closed.

    python benchmarks/bench_slowloris.py [--sockets 600] [--connects 50] [--modes mixed,header]

The flood is ``tests/e2e/slowloris.py`` in its own process (mixed: silent, half-header and
whole-header sockets; header: all send the whole header, then nothing). Each connect opens a
connection, declares a queue and closes (``connection_attempts=1``, ``socket_timeout=5``). Prints one
JSON line per mode: connects that got in, median and worst connect time, sockets the broker closed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pika
import pika.exceptions
from run import Headrace

FLOOD = Path(__file__).resolve().parents[1] / "tests" / "e2e" / "slowloris.py"


def measure(port: int, sockets: int, connects: int, mode: str) -> dict[str, object]:
    flood = subprocess.Popen([sys.executable, str(FLOOD), str(port), str(sockets), mode],
                             stdout=subprocess.PIPE, text=True)
    params = pika.URLParameters(f"amqp://guest:guest@127.0.0.1:{port}/%2F?connection_attempts=1&socket_timeout=5")
    times: list[float] = []
    ok = 0
    try:
        assert flood.stdout is not None and flood.stdout.readline().strip() == "ready"
        for _ in range(connects):
            start = time.monotonic()
            try:
                with pika.BlockingConnection(params) as conn:
                    conn.channel().queue_declare("", exclusive=True)
                ok += 1
            except pika.exceptions.AMQPError:
                pass
            times.append(time.monotonic() - start)
    finally:
        flood.terminate()
        out, _ = flood.communicate(timeout=10)
    return {"scenario": "slowloris", "mode": mode, "sockets": sockets, "connects": connects, "ok": ok,
            "ratio": round(ok / connects, 3), "median_s": round(statistics.median(times), 3),
            "max_s": round(max(times), 3), "flood_sockets_closed": int(out.split()[-1])}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sockets", type=int, default=600)
    ap.add_argument("--connects", type=int, default=50)
    ap.add_argument("--modes", default="mixed,header")
    args = ap.parse_args()
    for mode in args.modes.split(","):
        with tempfile.TemporaryDirectory() as tmp:
            server = Headrace(Path(tmp))
            try:
                print(json.dumps(measure(server.port, args.sockets, args.connects, mode)), flush=True)
            finally:
                server.stop()


if __name__ == "__main__":
    main()
