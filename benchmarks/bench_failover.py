"""Leader failover time: kill -9 of the leader to another node's "leads, epoch N" log line.

    .venv/bin/python benchmarks/bench_failover.py [--kills 10] [--ttl 2]

Starts a real etcd (Debian's etcd-server) and three ``headrace serve`` nodes on loopback ports,
then, --kills times: finds the leader, kill -9s it, and times until another node logs that it
leads with the next epoch; the killed node is then started again on its data directory (it takes
its own membership back and follows). Confirms do not wait for the cluster yet, so this is the
election's share of issue 42's "kill -9 to first confirm on the new leader". Expected around the
TTL less the time since the dead leader's last keep-alive (it renews every TTL/3), plus the
watch's delivery.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

LEADS = re.compile(r"headrace\.cluster: (\S+) leads, epoch (\d+)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Node:
    def __init__(self, name: str, data: Path, env: dict[str, str]) -> None:
        self.name, self.data, self.env = name, data, env
        self.lines: list[tuple[float, str]] = []
        self.proc: subprocess.Popen[str] | None = None

    def start(self) -> None:
        self.lines = []
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "headrace", "serve", "--amqp-port", "0", "--http-port", "0",
             "--data-dir", str(self.data)],
            env={**os.environ, **self.env, "HEADRACE_NODE_NAME": self.name}, stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL, text=True)
        threading.Thread(target=self._read, args=(self.proc,), daemon=True).start()

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            self.lines.append((time.monotonic(), line))

    def led(self) -> list[tuple[float, int]]:
        return [(t, int(m.group(2))) for t, line in list(self.lines) if (m := LEADS.search(line))]

    def kill(self) -> float:
        assert self.proc is not None
        at = time.monotonic()
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        return at


def wait_for(check, timeout: float):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.01)
    raise SystemExit(f"not within {timeout}s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kills", type=int, default=10)
    ap.add_argument("--ttl", type=int, default=2)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="headrace-failover-") as tmp:
        cport, pport = free_port(), free_port()
        client, peer = f"http://127.0.0.1:{cport}", f"http://127.0.0.1:{pport}"
        etcd = subprocess.Popen(
            ["etcd", "--name", "default", "--data-dir", f"{tmp}/etcd", "--listen-client-urls", client,
             "--advertise-client-urls", client, "--listen-peer-urls", peer,
             "--initial-advertise-peer-urls", peer, "--initial-cluster", f"default={peer}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        env = {"HEADRACE_CLUSTER_ETCD_ENDPOINTS": client, "HEADRACE_CLUSTER_LEASE_TTL_S": str(args.ttl)}
        nodes = [Node(f"hr{i}@localhost", Path(tmp) / f"n{i}", env) for i in (1, 2, 3)]
        times: list[float] = []
        try:
            time.sleep(1.0)  # etcd's own election; the nodes' start retries nothing
            for n in nodes:
                n.start()
            epoch = 1
            for _ in range(args.kills):
                leader = wait_for(lambda: next((n for n in nodes if any(e == epoch for _, e in n.led())), None), 30)
                time.sleep(args.ttl / 2)  # a keep-alive phase that varies between rounds
                killed_at = leader.kill()
                others = [n for n in nodes if n is not leader]
                at = wait_for(lambda: next((t for n in others for t, e in n.led() if e == epoch + 1), None), 30)
                times.append(at - killed_at)
                print(f"epoch {epoch} -> {epoch + 1}: {at - killed_at:.3f} s", flush=True)
                epoch += 1
                leader.start()
            print(f"failover over {len(times)} kills, ttl {args.ttl}s: median {statistics.median(times):.2f} s, "
                  f"max {max(times):.2f} s, min {min(times):.2f} s; load {os.getloadavg()[0]:.1f}")
        finally:
            for n in nodes:
                if n.proc is not None and n.proc.poll() is None:
                    n.proc.terminate()
                    n.proc.wait(15)
            etcd.terminate()
            etcd.wait(10)


if __name__ == "__main__":
    main()
