"""Saturated pubsub under different socket and gate settings, alternating in one run.

    .venv/bin/python benchmarks/bench_saturation.py [--rounds 3] [--scenarios saturated,pubsub,publish-only]

Each round starts a fresh broker per configuration (the order flipped every round, so a change of
machine load hits both sides alike) and runs the scenarios of ``run.py`` against it; before each
start, ``run.py`` drops what the kernel remembers about 127.0.0.1 (``ip tcp_metrics``), so one
configuration's retransmissions do not size the next one's client buffers. ``defaults`` is
server/config.py's (16 KiB windows from accept that grow for a connection no saturated queue holds,
7300-byte segments, gate bounds 100/30); ``autotuned`` Linux's own sizing (autotuned windows, 64 KiB
segments on loopback, 1000/250: the defaults of earlier runs). The ``profile``, ``mss1448`` and
``held`` configurations of earlier runs in RESULTS.md needed a fixed window or a held connection's
shrink, which are no longer settings (RESULTS.md, "Settings in groups"). ``publish-only`` is two pipelined pika
publishers of 128-byte messages into a queue without consumers (it must not be gated),
``publish-64k`` the same with 64 KiB messages (a bulk publisher, whose window grows). During
``saturated`` ``ss`` is sampled every 50 ms for where the messages wait: the largest client send
buffer (``skmem`` tb), and the clients' send queues and the broker's receive queues on its port
(the largest sample, and the median of each sample's largest). With ``--packets``, every
scenario also reports the client connections' bytes and data segments (the busiest, and all
that sent 256 KiB or more); with ``--cpu``, the broker's and the clients' CPU time and time
spent waiting for a core. With ``--trace DIR``, ``saturated`` also samples every client
socket's TCP state every 10 ms (send queue, ``skmem`` tb, congestion window, BBR's model) into
``DIR/<round>-<config>.json``, and reports per publisher when its send buffer reached its final
size and the congestion window up to then and after.
The configuration ``rabbitmq`` runs the same against RabbitMQ (when installed) instead of
headrace. ``+client_sndbuf=N`` on any configuration fixes the saturated publishers' socket send
buffer at N bytes (``SO_SNDBUF``, which Linux doubles and never grows), as a client host that
bounds it would: the wait that is otherwise in the buffer their kernel sizes for them.
Prints one JSON line per run.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import re
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).parent))
import amqp_load  # noqa: E402
import run  # noqa: E402

CONFIGS: dict[str, dict[str, str]] = {
    # the defaults: 16 KiB windows from accept that grow for a connection no saturated queue holds,
    # 7300-byte segments, gate bounds 100/30
    "defaults": {},
    # Linux's own sizing: autotuned windows, the route's MSS (64 KiB on loopback), bounds 1000/250
    # (the defaults before "Bounded windows by default" in RESULTS.md)
    "autotuned": {"HEADRACE_AMQP_RCVBUF": "0", "HEADRACE_AMQP_MSS": "0", "HEADRACE_SATURATION_READY": "1000",
                  "HEADRACE_SATURATION_RESUME_READY": "250"},
}
SS = shutil.which("ss") or "/usr/bin/ss"
# publish-only scenarios: (messages, producers, body bytes)
PUBLISH_ONLY = {"publish-only": (60_000, 2, 128), "publish-64k": (3_000, 2, 65_536)}


def settings_env(spec: str) -> dict[str, str]:
    """``amqp_rcvbuf=32768+amqp_mss=1448+saturation_ready=800`` -> the broker's environment for those settings."""
    pairs = (item.split("=", 1) for item in spec.split("+"))
    return {f"HEADRACE_{key.upper()}": value for key, value in pairs}


def client_side(name: str) -> tuple[str, int]:
    """``defaults+client_sndbuf=65536`` -> (``defaults``, 65536): the broker's configuration, and
    the saturated publishers' fixed send buffer (0: their kernel's sizing)."""
    parts = name.split("+")
    sndbuf = [int(p.split("=", 1)[1]) for p in parts if p.startswith("client_sndbuf=")]
    rest = "+".join(p for p in parts if not p.startswith("client_sndbuf=")) or "defaults"
    return rest, (sndbuf[-1] if sndbuf else 0)


def publish_only(target: amqp_load.Target, count: int = 60_000, producers: int = 2, size: int = 128) -> dict[str, Any]:
    conn, ch = amqp_load._admin(target)  # noqa: SLF001
    queue = f"bench-pubonly-{uuid.uuid4().hex[:8]}"
    ch.queue_declare(queue)
    out: mp.Queue = mp.Queue()
    prods = [mp.Process(target=amqp_load.producer, args=(target, "", [queue], b"x" * size, count // producers,
                                                         False, False, 0, out)) for _ in range(producers)]
    start = time.perf_counter()
    amqp_load._run(prods)  # noqa: SLF001
    amqp_load._collect(out, producers, 120)  # noqa: SLF001
    wall = time.perf_counter() - start
    amqp_load._join(prods)  # noqa: SLF001
    queued = ch.queue_declare(queue, passive=True).method.message_count
    ch.queue_delete(queue)
    conn.close()
    return {"rate": queued / wall, "queued": queued, "mb_s": queued * size / wall / 1e6}


def ss(*args: str) -> list[str]:
    """``ss``'s lines after the header, run with ``posix_spawn`` into a file. ``subprocess`` reads
    its child's exec status from a pipe until end of file, and the load generator forks its clients
    from another thread meanwhile: a client forked while that pipe is open keeps its write end,
    and the read waits until that client exits (a sampler then lost the first ~1 s of a run)."""
    with tempfile.TemporaryFile("w+") as out:
        pid = os.posix_spawn(SS, ["ss", *args], os.environ, file_actions=[
            (os.POSIX_SPAWN_DUP2, out.fileno(), 1), (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0)])
        os.waitpid(pid, 0)
        out.seek(0)
        return out.read().splitlines()[1:]


def sockets(*args: str) -> list[tuple[list[str], str]]:
    """Each socket ``ss -i ...`` lists: its columns (state, queues, addresses) and its info line."""
    lines = ss(*args)
    return [(lines[i].split(), lines[i + 1]) for i in range(0, len(lines) - 1, 2)]


def sample_tcp(port: int, stop: threading.Event, seen: dict[str, Any]) -> None:
    """Largest client send buffer / send queue and broker receive queue on ``port`` until ``stop``,
    and the medians over the samples (each sample's largest send and receive queue)."""
    send_qs: list[int] = []
    recv_qs: list[int] = []
    while not stop.is_set():
        send_q = recv_q = 0
        for parts, info in sockets("-tnmi", f"( sport = :{port} or dport = :{port} )"):
            if len(parts) < 5 or parts[0] != "ESTAB":
                continue
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


def sample_packets(port: int, stop: threading.Event, seen: dict[str, Any]) -> None:
    """The client connections on ``port`` until ``stop``: the busiest one's (most bytes acked)
    bytes and data segments, and every one's that sent 256 KiB or more, busiest first
    (``client_bytes_segs``: in ``topic100k`` the connection that made the bindings is the busiest,
    the publisher the next). Bytes per segment tell whether a publisher's small writes left one
    packet each or joined into full segments (ARCHITECTURE.md, "Backpressure")."""
    seen_by_peer: dict[str, tuple[int, int]] = {}
    while not stop.is_set():
        for parts, info in sockets("-tin", f"( dport = :{port} )"):
            acked = re.search(r"bytes_acked:(\d+)", info)
            segs = re.search(r"data_segs_out:(\d+)", info)
            if acked and segs:
                seen_by_peer[parts[3]] = (int(acked.group(1)), int(segs.group(1)))
        if seen_by_peer:
            ranked = sorted(seen_by_peer.values(), reverse=True)
            seen["busiest_client_bytes"], seen["busiest_client_segs"] = ranked[0]
            seen["client_bytes_segs"] = [list(pair) for pair in ranked if pair[0] >= 256 << 10]
        time.sleep(0.1)


def cpu_and_wait(pid: int) -> tuple[float, float]:
    """``run.cpu_seconds`` and ``run.wait_seconds`` of a process; (0, 0) once it is gone."""
    try:
        return run.cpu_seconds(pid), run.wait_seconds(pid)
    except (OSError, IndexError, ValueError):
        return 0.0, 0.0


def sample_cpu(broker: int, stop: threading.Event, seen: dict[str, Any]) -> None:
    """The broker's CPU and wait for a core from the start until ``stop``, and each
    load-generating client's (this script's forks started since, not the samplers' ``ss``), read
    every 20 ms, as last seen before it exited. When the machine's cores are the limit, every
    process waits for one about as long as it runs, and the throughput is the cores over the sum
    of everyone's CPU per message."""
    start = time.perf_counter()
    cpu0, wait0 = cpu_and_wait(broker)
    clients: dict[int, tuple[float, float]] = {}
    me = psutil.Process()
    before = {child.pid for child in me.children(recursive=True)}  # the broker and its wrappers
    while True:
        for child in me.children(recursive=True):
            try:
                if child.pid in before or child.name() != me.name():
                    continue
            except psutil.Error:  # gone meanwhile
                continue
            got = cpu_and_wait(child.pid)
            if got[0]:
                clients[child.pid] = got
        if stop.wait(0.02):
            break
    cpu, wait = cpu_and_wait(broker)  # still running: the round stops it after this thread ends
    seen.update({"wall_s": round(time.perf_counter() - start, 2), "broker_cpu_s": round(cpu - cpu0, 2),
                 "broker_wait_s": round(wait - wait0, 2),
                 "clients_cpu_s": sorted((round(c, 2) for c, _ in clients.values()), reverse=True),
                 "clients_wait_s": round(sum(w for _, w in clients.values()), 2)})


TRACE_FIELDS = {"cwnd": r"cwnd:(\d+)", "tb": r"tb(\d+)", "bytes_acked": r"bytes_acked:(\d+)",
                "snd_wnd": r"snd_wnd:(\d+)", "segs": r"data_segs_out:(\d+)",
                "bbr": r"bbr:\(([^)]*)\)"}


def trace_clients(port: int, stop: threading.Event, rows: list[dict[str, Any]]) -> None:
    """Every client socket on ``port`` every 10 ms until ``stop``: seconds since the start, the
    client's port, its send queue and the ``TRACE_FIELDS`` that ``ss -tnmi`` shows for it."""
    start = time.perf_counter()
    while not stop.is_set():
        found_sockets = sockets("-tnmi", f"( dport = :{port} )")
        at = round(time.perf_counter() - start, 3)
        for parts, info in found_sockets:
            row: dict[str, Any] = {"t": at, "client": parts[3].rsplit(":", 1)[1], "send_q": int(parts[2])}
            for key, pattern in TRACE_FIELDS.items():
                found = re.search(pattern, info)
                if found:
                    row[key] = found.group(1) if key == "bbr" else int(found.group(1))
            rows.append(row)
        time.sleep(0.01)


def trace_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per publisher (a client that sent over 1 MB), largest send buffer first: its final send
    buffer, when it was set (s), the largest congestion window up to then, and the median window
    over the rest of the run."""
    clients: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        clients.setdefault(row["client"], []).append(row)
    found = []
    for samples in clients.values():
        if max(r.get("bytes_acked", 0) for r in samples) < 1_000_000:
            continue
        final = max(r.get("tb", 0) for r in samples)
        set_at = next(r["t"] for r in samples if r.get("tb", 0) == final)
        later = [r.get("cwnd", 0) for r in samples if r["t"] > set_at]
        found.append({"tb": final, "tb_set_at": set_at,
                      "cwnd_until_set": max(r.get("cwnd", 0) for r in samples if r["t"] <= set_at),
                      "cwnd_p50_after": statistics.median(later) if later else None})
    return {"publishers": sorted(found, key=lambda p: -p["tb"])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--scenarios", default="saturated,pubsub,publish-only")
    ap.add_argument("--configs", default="defaults,autotuned",
                    help="defaults, autotuned, rabbitmq, or settings joined by '+', e.g. "
                         "amqp_rcvbuf=32768+amqp_mss=1448; '+client_sndbuf=N' fixes the saturated publishers' "
                         "send buffer (e.g. defaults+client_sndbuf=65536, rabbitmq+client_sndbuf=65536)")
    ap.add_argument("--packets", action="store_true",
                    help="also report the client connections' bytes and data segments")
    ap.add_argument("--trace", metavar="DIR", help="write the clients' TCP state through each saturated run here")
    ap.add_argument("--cpu", action="store_true",
                    help="also report the broker's and the clients' CPU time and time waiting for a core")
    args = ap.parse_args()
    names = args.configs.split(",")
    for rnd in range(args.rounds):
        for name in names if rnd % 2 == 0 else names[::-1]:
            config, client_sndbuf = client_side(name)
            with tempfile.TemporaryDirectory() as tmp:
                broker: run.Headrace | run.RabbitMQ
                if config == "rabbitmq":
                    broker = run.RabbitMQ(Path(tmp))
                else:
                    broker = run.Headrace(Path(tmp), CONFIGS[config] if config in CONFIGS else settings_env(config))
                try:
                    target = amqp_load.Target(broker.name, "127.0.0.1", broker.port)
                    for scenario in args.scenarios.split(","):
                        load = os.getloadavg()[0]
                        seen: dict[str, Any] = {}
                        stop = threading.Event()
                        sampler = threading.Thread(target=sample_tcp, args=(broker.port, stop, seen))
                        counter = threading.Thread(target=sample_packets, args=(broker.port, stop, seen))
                        traced: list[dict[str, Any]] = []
                        tracer = threading.Thread(target=trace_clients, args=(broker.port, stop, traced))
                        cpu = threading.Thread(target=sample_cpu, args=(run.broker_pid(broker), stop, seen))
                        if scenario == "saturated":
                            sampler.start()
                            if args.trace:
                                tracer.start()
                        if args.packets:
                            counter.start()
                        if args.cpu:
                            cpu.start()
                        if scenario in PUBLISH_ONLY:
                            result = publish_only(target, *PUBLISH_ONLY[scenario])
                        elif scenario == "saturated" and client_sndbuf:
                            result = amqp_load.scenario_saturated(target, client_sndbuf=client_sndbuf)
                        else:
                            result = run.run_scenario(scenario, broker, False)
                        stop.set()
                        for thread in (sampler, counter, tracer, cpu):
                            if thread.is_alive():
                                thread.join()
                        if traced:
                            Path(args.trace).mkdir(parents=True, exist_ok=True)
                            (Path(args.trace) / f"{rnd + 1}-{name}.json").write_text(json.dumps(traced))
                            seen.update(trace_summary(traced))
                        # sub-millisecond latencies (the latency scenario) keep three decimals
                        keep = {k: round(v, 3 if k.endswith("_ms") and v < 10 else None) for k, v in result.items()
                                if k in ("rate", "publish_rate", "p50_ms", "p99_ms", "peak_ready", "mb_s")}
                        print(json.dumps({"round": rnd + 1, "config": name, "scenario": scenario,
                                          "load1": round(load, 1), **keep, **seen}), flush=True)
                finally:
                    broker.stop()


if __name__ == "__main__":
    main()
