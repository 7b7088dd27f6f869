"""The single-core ceiling: broker CPU time per message end to end, over real sockets.

    .venv/bin/python benchmarks/bench_ceiling.py [--messages 100000] [--producers 4] [--rounds 3]

Starts a broker, runs the pubsub scenario of ``amqp_load`` (pipelined pika publishers, batched
acks) and reads the broker process's CPU time (user + system, /proc/PID/stat) before and after:
µs of broker CPU per message delivered, and the rate one fully busy core would sustain at that
cost (1e6 / µs). The clients' CPU is not in the figure, so a loaded machine changes the rate the
run reaches much more than the CPU per message.

Each round's figure is also given as a ratio to Python's floor (``bench_floor.py``: the least any
Python broker must do per message), measured in this process before the rounds and after them, so
the ratio means the same on a machine of any speed.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import amqp_load  # noqa: E402
import bench_floor  # noqa: E402
import run  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--producers", type=int, default=4)
    ap.add_argument("--consumers", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    floors = [bench_floor.floor_us(100_000, 3)]
    figures: list[float] = []
    with tempfile.TemporaryDirectory(prefix="headrace-ceiling-") as tmp:
        server = run.Headrace(Path(tmp))
        try:
            target = amqp_load.Target("headrace", "127.0.0.1", server.port)
            for i in range(args.rounds):
                before = run.cpu_seconds(server.proc.pid)
                result = amqp_load.scenario_pubsub(target, producers=args.producers, consumers=args.consumers,
                                                   count=args.messages)
                used = run.cpu_seconds(server.proc.pid) - before
                per = used / max(result["consumed"], 1) * 1e6
                figures.append(per)
                print(f"round {i + 1}: {result['consumed']} messages, broker CPU {used:.2f} s, "
                      f"{per:.1f} µs/message, ceiling {1e6 / per:,.0f} msg/s on one core, "
                      f"reached {result['rate']:,.0f} msg/s", flush=True)
        finally:
            server.stop()
    floors.append(bench_floor.floor_us(100_000, 3))
    floor = statistics.median(floors)
    per = statistics.median(figures)
    print(f"floor {floor:.2f} µs/message (before {floors[0]:.2f}, after {floors[1]:.2f}); broker median "
          f"{per:.1f} µs/message = {per / floor:.2f} x the floor", flush=True)


if __name__ == "__main__":
    main()
