"""The single-core ceiling: broker CPU time per message end to end, over real sockets.

    .venv/bin/python benchmarks/bench_ceiling.py [--messages 100000] [--producers 4] [--rounds 3]
        [--scenarios pubsub,fanout] [--fanout-queues 10]

Starts a broker, runs the pubsub scenario of ``amqp_load`` (pipelined pika publishers, batched
acks) and reads the broker process's CPU time (user + system, /proc/PID/stat) before and after:
µs of broker CPU per message delivered, and the rate one fully busy core would sustain at that
cost (1e6 / µs). ``fanout`` does the same for ``amqp_load``'s fanout scenario (one publisher, a
fanout exchange bound to ``--fanout-queues`` queues, a consumer per five queues; ``--messages``
deliveries in all): µs of broker CPU per delivery. The clients' CPU is not in the figure, so a loaded machine changes the rate the
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
    ap.add_argument("--scenarios", default="pubsub,fanout")
    ap.add_argument("--fanout-queues", type=int, default=10)
    args = ap.parse_args()
    scenarios = args.scenarios.split(",")
    floors = [bench_floor.floor_us(100_000, 3)]
    figures: dict[str, list[float]] = {name: [] for name in scenarios}
    with tempfile.TemporaryDirectory(prefix="headrace-ceiling-") as tmp:
        server = run.Headrace(Path(tmp))
        try:
            target = amqp_load.Target("headrace", "127.0.0.1", server.port)
            for i in range(args.rounds):
                for name in scenarios:
                    before = run.cpu_seconds(server.proc.pid)
                    if name == "fanout":
                        result = amqp_load.scenario_fanout(target, queues=args.fanout_queues,
                                                           count=args.messages // args.fanout_queues)
                        done = result["delivered"]
                    else:
                        result = amqp_load.scenario_pubsub(target, producers=args.producers,
                                                           consumers=args.consumers, count=args.messages)
                        done = result["consumed"]
                    used = run.cpu_seconds(server.proc.pid) - before
                    per = used / max(done, 1) * 1e6
                    figures[name].append(per)
                    print(f"round {i + 1} {name}: {done} deliveries, broker CPU {used:.2f} s, "
                          f"{per:.1f} µs/delivery, ceiling {1e6 / per:,.0f} deliveries/s on one core, "
                          f"reached {result['rate']:,.0f}/s", flush=True)
        finally:
            server.stop()
    floors.append(bench_floor.floor_us(100_000, 3))
    floor = statistics.median(floors)
    print(f"floor {floor:.2f} µs/message (before {floors[0]:.2f}, after {floors[1]:.2f})", flush=True)
    for name, values in figures.items():
        per = statistics.median(values)
        unit = "delivery" if name == "fanout" else "message"
        print(f"{name}: broker median {per:.1f} µs/{unit} = {per / floor:.2f} x the floor", flush=True)


if __name__ == "__main__":
    main()
