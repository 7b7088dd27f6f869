"""Side-by-side benchmark: headrace vs RabbitMQ (when installed), alternating A B A B in one run.

    .venv/bin/python benchmarks/run.py [--scenarios pubsub,fanout,...] [--pairs 5] [--no-rabbitmq]

Prints per-pair ratios (headrace / RabbitMQ) with median/min/max and one JSON line per scenario.
Brokers run with their data in temporary directories and are stopped at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
import amqp_load  # noqa: E402
import http_load  # noqa: E402

RATE_KEYS = {"pubsub": "rate", "saturated": "p99_ms", "confirms": "rate", "fanout": "rate", "topic": "rate",
             "topic100k": "publish_rate", "latency": "p99_ms", "backlog": "peak_rss_mb", "backlog-persistent": "peak_rss_mb", "http-batch": "rate"}
LOWER_IS_BETTER = {"saturated", "latency", "backlog", "backlog-persistent"}
HEADRACE_ONLY = {"http-batch"}  # RabbitMQ's management API has no batch publish


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def forget_loopback_metrics() -> None:
    """Drop what Linux remembers about 127.0.0.1 (``ip tcp_metrics``) before a broker starts.

    Linux keeps, per destination, the last connections' round trip, congestion window and
    reordering degree, and seeds every new connection with them. A run that made the kernel see
    retransmissions can leave ``reordering 300`` behind, and every later client socket to
    127.0.0.1 then starts with a send buffer sized for 301 segments (2 MB with BBR) instead of its
    congestion window: the next configuration's latency pays for the previous one's losses. Each
    broker starts from a clean slate instead. Needs root (CI and this machine); otherwise a no-op."""
    subprocess.run(["ip", "tcp_metrics", "delete", "127.0.0.1"], capture_output=True, check=False)


def wait_port(port: int, timeout: float) -> None:
    end = time.time() + timeout
    while time.time() < end:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"nothing listening on {port} after {timeout}s")


class Headrace:
    name = "headrace"

    def __init__(self, tmp: Path, env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.http_port = free_port()
        forget_loopback_metrics()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "headrace", "serve", "--amqp-port", str(self.port), "--http-port", str(self.http_port),
             "--data-dir", str(tmp / "headrace"), "--log-level", "warning"],
            env={**os.environ, "HEADRACE_MEMORY_HIGH_WATERMARK": "0.9", **(env or {})},
        )
        wait_port(self.port, 30)

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def free_port_pair(low: int = 25000, high: int = 40000) -> int:
    """A port P with P + 20000 free too: RabbitMQ puts its distribution port there (< 65536)."""
    for port in range(low, high):
        try:
            for p in (port, port + 20000):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", p))
            return port
        except OSError:
            continue
    raise RuntimeError("no free port pair for RabbitMQ")


class RabbitMQ:
    name = "rabbitmq"

    def __init__(self, tmp: Path, plugins: str = "[].", config: str = "") -> None:
        """``plugins``: the enabled_plugins term; ``config``: rabbitmq.conf lines (none by default)."""
        self.port = free_port_pair()
        forget_loopback_metrics()
        base = tmp / "rabbitmq"
        (base / "mnesia").mkdir(parents=True)
        (base / "log").mkdir()
        (base / "enabled_plugins").write_text(plugins + "\n")
        (base / "rabbitmq.conf").write_text(config)
        if os.geteuid() == 0:  # Debian's rabbitmq-server drops to the rabbitmq user
            os.chmod(tmp, 0o755)
            for path in [base, *base.rglob("*")]:
                shutil.chown(path, "rabbitmq")
        env = {**os.environ, "RABBITMQ_NODE_PORT": str(self.port), "RABBITMQ_NODENAME": f"bench{self.port}@localhost",
               "RABBITMQ_MNESIA_BASE": str(base / "mnesia"), "RABBITMQ_LOG_BASE": str(base / "log"),
               "RABBITMQ_ENABLED_PLUGINS_FILE": str(base / "enabled_plugins"),
               "RABBITMQ_FEATURE_FLAGS_FILE": str(base / "feature_flags"),
               "RABBITMQ_CONFIG_FILE": str(base / "rabbitmq.conf"), "HOME": str(base)}
        self.proc = subprocess.Popen(["rabbitmq-server"], env=env, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, start_new_session=True)
        wait_port(self.port, 90)
        self.vm_pid = listener_pid(self.port) or self.proc.pid

    def stop(self) -> None:
        """The Erlang VM runs as the rabbitmq user in its own session: stop it by its PID, then the
        wrapper's process group, then epmd if it is ours alone."""
        for pid in (self.vm_pid, -self.proc.pid):
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
        end = time.time() + 30
        while _alive(self.vm_pid) and time.time() < end:
            time.sleep(0.2)
        if _alive(self.vm_pid):
            os.kill(self.vm_pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def listener_pid(port: int) -> int | None:
    """The PID that listens on a TCP port (from /proc: the socket inode, then the process holding it)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "0A":  # 0A = LISTEN
                inodes.add(fields[9])
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            for fd in (proc / "fd").iterdir():
                link = os.readlink(fd)
                if link.startswith("socket:[") and link[8:-1] in inodes:
                    return int(proc.name)
        except OSError:
            continue
    return None


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far, all its threads (``/proc/PID/stat``): a figure
    the machine's load does not inflate."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_seconds(pid: int) -> float:
    """Time a process's threads have spent runnable but waiting for a core (``schedstat``; the
    Erlang VM's schedulers are threads)."""
    return sum(int((task / "schedstat").read_text().split()[1]) for task in Path(f"/proc/{pid}/task").iterdir()) / 1e9


def broker_pid(server: Any) -> int:
    if isinstance(server, RabbitMQ):
        return server.vm_pid  # the Erlang VM holds the memory, not the shell wrappers around it
    return server.proc.pid


def run_scenario(name: str, server: Any, quick: bool) -> dict[str, Any]:
    target = amqp_load.Target(server.name, "127.0.0.1", server.port)
    scale = 0.2 if quick else 1.0
    if name == "pubsub":
        return amqp_load.scenario_pubsub(target, count=int(60_000 * scale))
    if name == "saturated":
        return amqp_load.scenario_saturated(target, count=int(60_000 * scale))
    if name == "confirms":
        return amqp_load.scenario_confirms(target, count=int(10_000 * scale))
    if name == "fanout":
        return amqp_load.scenario_fanout(target, count=int(10_000 * scale))
    if name == "topic":
        return amqp_load.scenario_topic(target, bindings=1000, count=int(20_000 * scale))
    if name == "topic100k":
        return amqp_load.scenario_topic(target, bindings=100_000, count=int(20_000 * scale), timeout=300)
    if name == "latency":
        return amqp_load.scenario_latency(target, rate=10_000, seconds=3 if quick else 5)
    if name == "backlog":
        return amqp_load.scenario_backlog(target, count=int(1_000_000 * scale), broker_pid=broker_pid(server))
    if name == "backlog-persistent":
        return amqp_load.scenario_backlog(target, count=int(1_000_000 * scale), broker_pid=broker_pid(server),
                                          persistent=True)
    if name == "http-batch":
        return http_load.scenario_http_batch(f"http://127.0.0.1:{server.http_port}", messages=int(100_000 * scale))
    raise SystemExit(f"unknown scenario {name}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenarios", default="pubsub,confirms,fanout,topic,latency")
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--no-rabbitmq", action="store_true")
    ap.add_argument("--quick", action="store_true", help="small message counts (smoke run)")
    ap.add_argument("--json-out", type=Path, help="append the per-scenario JSON lines to this file")
    args = ap.parse_args()
    use_rabbit = not args.no_rabbitmq and shutil.which("rabbitmq-server") is not None
    print(f"# machine: {platform.platform()}, {os.cpu_count()} cores, Python {platform.python_version()}",
          flush=True)
    if not use_rabbit:
        print("# RabbitMQ not installed (or --no-rabbitmq): headrace alone")
    with tempfile.TemporaryDirectory(prefix="headrace-bench-") as tmpdir:
        tmp = Path(tmpdir)
        servers: list[Any] = [Headrace(tmp)]
        if use_rabbit:
            servers.append(RabbitMQ(tmp))
        try:
            for scenario in args.scenarios.split(","):
                key = RATE_KEYS[scenario]
                runs: dict[str, list[dict[str, Any]]] = {s.name: [] for s in servers}
                for _ in range(args.pairs):
                    for server in servers:  # A B A B ...
                        if scenario in HEADRACE_ONLY and not isinstance(server, Headrace):
                            continue
                        result = run_scenario(scenario, server, args.quick)
                        runs[server.name].append(result)
                        print(f"  {scenario:9s} {server.name:9s} {key}={result.get(key)} {result}", flush=True)
                line: dict[str, Any] = {"scenario": scenario, "metric": key}
                for name, rs in runs.items():
                    vals = [r[key] for r in rs if r.get(key) is not None]
                    if vals:
                        line[name] = amqp_load.summarize(vals)
                if use_rabbit:
                    ratios = [h[key] / r[key] for h, r in zip(runs["headrace"], runs["rabbitmq"])
                              if h.get(key) and r.get(key)]
                    if ratios:
                        line["ratio_headrace_over_rabbitmq"] = amqp_load.summarize(ratios)
                        better = "lower" if scenario in LOWER_IS_BETTER else "higher"
                        print(f"{scenario}: ratio median {line['ratio_headrace_over_rabbitmq']['median']:.2f} "
                              f"({better} is better for headrace)")
                print(json.dumps(line), flush=True)
                if args.json_out:
                    with args.json_out.open("a") as f:
                        f.write(json.dumps({**line, "runs": runs}) + "\n")
        finally:
            for server in servers:
                server.stop()


if __name__ == "__main__":
    main()
