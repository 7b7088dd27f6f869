"""Publisher confirms against one broker: the rate, the broker's CPU per confirmed message, and what
the broker did per message (system calls, context switches).

    .venv/bin/python benchmarks/bench_confirms.py [--rounds 1] [--messages 6000]

Starts a headrace broker (from whatever ``headrace`` this interpreter imports: set PYTHONPATH to a
copy laid out as a package to measure another tree), runs ``amqp_load``'s confirms scenario (4 pika
publishers each waiting for its confirm, persistent messages to a durable queue, 2 consumers) and
reads /proc/PID/stat, /proc/PID/io and /proc/PID/status around each round. One JSON line a round.
Rounds of two trees alternated, one broker each, give comparable medians on a noisy machine.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import amqp_load  # noqa: E402
import run  # noqa: E402


def counters(pid: int) -> dict[str, float]:
    stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    io = dict(line.split(": ") for line in Path(f"/proc/{pid}/io").read_text().splitlines())
    status = Path(f"/proc/{pid}/status").read_text()
    return {
        "cpu": (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK"),  # utime + stime
        "reads": int(io["syscr"]),
        "writes": int(io["syscw"]),
        "voluntary": int(status.split("\nvoluntary_ctxt_switches:")[1].split()[0]),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--messages", type=int, default=6000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        broker = run.Headrace(Path(tmp))
        try:
            target = amqp_load.Target("headrace", "127.0.0.1", broker.port)
            amqp_load.scenario_confirms(target, count=400)  # connections, queue code paths warmed
            for i in range(args.rounds):
                before = counters(broker.proc.pid)
                result = amqp_load.scenario_confirms(target, count=args.messages)
                after = counters(broker.proc.pid)
                n = result["consumed"] or 1
                print(json.dumps({
                    "round": i + 1,
                    "rate": round(result["rate"]),
                    "confirm_p50_ms": round(result.get("confirm_p50_ms", 0.0), 3),
                    "broker_cpu_us": round((after["cpu"] - before["cpu"]) / n * 1e6, 1),
                    "reads_per_msg": round((after["reads"] - before["reads"]) / n, 3),
                    "writes_per_msg": round((after["writes"] - before["writes"]) / n, 3),
                    "sleeps_per_msg": round((after["voluntary"] - before["voluntary"]) / n, 3),
                }), flush=True)
        finally:
            broker.stop()


if __name__ == "__main__":
    main()
