"""Declaring N durable queues one by one over AMQP (pika, one queue.declare per round trip): the
total time, the rate, the size of the definitions file at the end and the bytes the broker wrote
(``write_bytes`` of /proc/<pid>/io), which shows whether each durable change costs O(1) or O(n),
and the fsync/fdatasync calls it made meanwhile (counted by ``perf stat`` on the syscall
tracepoints, which costs the broker nothing measurable; left out when perf is missing).

    .venv/bin/python benchmarks/bench_definitions.py [--queues 10000]
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pika

sys.path.insert(0, str(Path(__file__).parent))
from run import Headrace  # noqa: E402


def written_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/io").read_text().splitlines():
        if line.startswith("write_bytes:"):
            return int(line.split()[1])
    return 0


def count_fsyncs(pid: int) -> subprocess.Popen[str] | None:
    """``perf stat`` on the broker's fsync and fdatasync syscalls, until it gets SIGINT."""
    if shutil.which("perf") is None:
        return None
    perf = subprocess.Popen(["perf", "stat", "-e", "syscalls:sys_enter_fsync,syscalls:sys_enter_fdatasync",
                             "-p", str(pid)], stderr=subprocess.PIPE, text=True)
    time.sleep(1)  # attached
    return perf


def fsyncs_counted(perf: subprocess.Popen[str] | None) -> int | None:
    if perf is None:
        return None
    perf.send_signal(signal.SIGINT)
    _, err = perf.communicate(timeout=30)
    counts = [int(m.group(1).replace(",", "")) for m in re.finditer(r"^\s*([\d,]+)\s+syscalls:", err, re.M)]
    return sum(counts) if counts else None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--queues", type=int, default=10_000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="headrace-defs-", dir="/var/tmp") as tmpdir:
        server = Headrace(Path(tmpdir))
        try:
            conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", server.port))
            ch = conn.channel()
            perf = count_fsyncs(server.proc.pid)
            before = written_bytes(server.proc.pid)
            start = time.perf_counter()
            for i in range(args.queues):
                ch.queue_declare(f"durable-{i}", durable=True)
            elapsed = time.perf_counter() - start
            written = written_bytes(server.proc.pid) - before
            fsyncs = fsyncs_counted(perf)
            conn.close()
            size = sum(p.stat().st_size for p in (Path(tmpdir) / "headrace").glob("definitions*"))
        finally:
            server.stop()
    print(json.dumps({"scenario": "declare-durable-queues", "queues": args.queues,
                      "seconds": round(elapsed, 2), "per_second": round(args.queues / elapsed),
                      "definitions_bytes": size, "broker_write_bytes": written, "fsyncs": fsyncs}, indent=1))


if __name__ == "__main__":
    main()
