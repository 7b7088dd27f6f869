"""AMQP load generator for any AMQP 0-9-1 broker, built on pika with batched socket flushing.

Each producer/consumer runs in its own process (the client, not the broker, is usually the
bottleneck in Python). Producers queue ``BATCH`` publishes in pika's outbound buffer and flush once;
consumers ack with ``multiple=True`` every ``ACK_EVERY`` deliveries. Every scenario is time-bounded
and deletes what it declared.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue as queue_mod
import socket
import statistics
import time
import uuid
from dataclasses import dataclass
from typing import Any

import pika

BATCH = 200  # publishes per socket flush
ACK_EVERY = 50  # deliveries per multiple-ack


@dataclass
class Target:
    name: str
    host: str
    port: int
    user: str = "guest"
    password: str = "guest"
    vhost: str = "/"

    @property
    def params(self) -> pika.ConnectionParameters:
        return pika.ConnectionParameters(self.host, self.port, self.vhost, pika.PlainCredentials(self.user, self.password),
                                         heartbeat=0, blocked_connection_timeout=60)


def _flush(conn: pika.BlockingConnection) -> None:
    conn._flush_output(lambda: True)  # noqa: SLF001 - push pika's outbound buffer without waiting


def producer(target: Target, exchange: str, keys: list[str], body: bytes, count: int, persistent: bool,
             confirms: bool, rate: float, out: mp.Queue, stamp: bool = False, sndbuf: int = 0) -> None:
    """Publish ``count`` messages; with a ``rate`` (or ``stamp``) each body starts with the publish
    time, so consumers measure end-to-end latency. ``sndbuf`` (bytes, 0 = the kernel's sizing)
    fixes the socket's send buffer, as a client host's ``net.ipv4.tcp_wmem`` or the application's
    ``SO_SNDBUF`` would (Linux doubles it and then never grows it)."""
    conn = pika.BlockingConnection(target.params)
    if sndbuf:
        conn._impl._transport._sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)  # noqa: SLF001
    ch = conn.channel()
    props = pika.BasicProperties(delivery_mode=2 if persistent else 1)
    sent = 0
    start = time.perf_counter()
    nkeys = len(keys)
    confirm_lat: list[float] = []
    if confirms:
        ch.confirm_delivery()
        # pika's blocking confirms are one round trip per message; that is what applications see,
        # and each round trip is one publish-to-confirm latency sample
        clock = time.perf_counter
        while sent < count:
            t0 = clock()
            ch.basic_publish(exchange, keys[sent % nkeys], body, props)
            confirm_lat.append(clock() - t0)
            sent += 1
    else:
        impl = ch._impl  # noqa: SLF001
        while sent < count:
            n = min(BATCH, count - sent)
            for i in range(sent, sent + n):
                if rate:
                    stamp = time.perf_counter()
                    due = start + i / rate
                    if due > stamp:
                        _flush(conn)
                        time.sleep(due - stamp)
                    payload = b"%020.9f" % time.time() + body[20:]
                elif stamp:
                    payload = b"%020.9f" % time.time() + body[20:]
                else:
                    payload = body
                impl.basic_publish(exchange, keys[i % nkeys], payload, props)
            sent += n
            _flush(conn)
            conn.process_data_events(0)
    elapsed = time.perf_counter() - start
    ch.close()  # clean close before counting: an abrupt close may make the kernel drop unread input
    conn.close()
    out.put(("produced", sent, elapsed, confirm_lat))


def consumer(target: Target, queues: list[str], expected: int, prefetch: int, deadline: float,
             out: mp.Queue, latency: bool = False, shared: Any = None) -> None:
    """Consume until ``expected`` messages arrived here, or, with ``shared`` (a counter shared by
    competing consumers of one queue), until all consumers together received ``expected``."""
    conn = pika.BlockingConnection(target.params)
    ch = conn.channel()
    ch.basic_qos(prefetch_count=prefetch)
    got = 0
    pending = 0
    first = last = 0.0
    lat: list[float] = []

    def on_message(channel: Any, method: Any, props: Any, body: bytes) -> None:
        nonlocal got, pending, first, last
        now = time.perf_counter()
        if not got:
            first = now
        last = now
        got += 1
        pending += 1
        if shared is not None:
            with shared.get_lock():
                shared.value += 1
        if latency:
            lat.append(time.time() - float(body[:20]))
        if pending >= ACK_EVERY or done():
            channel.basic_ack(method.delivery_tag, multiple=True)
            pending = 0

    def done() -> bool:
        return (shared.value if shared is not None else got) >= expected

    for q in queues:
        ch.basic_consume(q, on_message)
    while not done() and time.time() < deadline:
        conn.process_data_events(time_limit=0.05)
    if pending:
        ch.basic_ack(0, multiple=True)
    ch.close()
    conn.close()
    out.put(("consumed", got, max(last - first, 1e-9), lat))


def _admin(target: Target) -> tuple[pika.BlockingConnection, Any]:
    conn = pika.BlockingConnection(target.params)
    return conn, conn.channel()


def _collect(out: mp.Queue, n: int, timeout: float) -> list[tuple]:
    results = []
    end = time.time() + timeout
    while len(results) < n:
        try:
            results.append(out.get(timeout=max(0.1, end - time.time())))
        except queue_mod.Empty:
            break
    return results


def _run(procs: list[mp.Process]) -> None:
    for p in procs:
        p.start()


def _join(procs: list[mp.Process]) -> None:
    for p in procs:
        p.join(30)
        if p.is_alive():
            p.kill()


def scenario_pubsub(target: Target, *, producers: int = 2, consumers: int = 2, count: int = 50_000,
                    size: int = 128, prefetch: int = 200, timeout: float = 60, persistent: bool = False,
                    confirms: bool = False, durable: bool = False) -> dict[str, Any]:
    """P producers -> 1 queue -> C consumers, manual ack. Rate = messages consumed / wall time."""
    tag = uuid.uuid4().hex[:8]
    qname = f"bench-{tag}"
    conn, ch = _admin(target)
    ch.queue_declare(qname, durable=durable)
    out: mp.Queue = mp.Queue()
    per = count // producers
    total = per * producers
    deadline = time.time() + timeout
    shared = mp.Value("q", 0)
    cons = [mp.Process(target=consumer, args=(target, [qname], total, prefetch, deadline, out, False, shared))
            for _ in range(consumers)]
    prods = [mp.Process(target=producer, args=(target, "", [qname], b"x" * size, per, persistent, confirms, 0, out))
             for _ in range(producers)]
    _run(cons)
    start = time.perf_counter()
    _run(prods)
    results = _collect(out, producers + consumers, timeout + 10)
    wall = time.perf_counter() - start
    _join(cons + prods)
    ch.queue_delete(qname)
    conn.close()
    consumed = sum(r[1] for r in results if r[0] == "consumed")
    produced = sum(r[1] for r in results if r[0] == "produced")
    pub_time = max((r[2] for r in results if r[0] == "produced"), default=wall)
    result = {"produced": produced, "consumed": consumed, "publish_rate": produced / pub_time,
              "rate": consumed / wall, "complete": consumed == total}
    if confirms:
        lat = sorted(x for r in results if r[0] == "produced" for x in r[3])
        if lat:
            result["confirm_p50_ms"] = lat[len(lat) // 2] * 1000
            result["confirm_p99_ms"] = lat[max(int(len(lat) * 0.99) - 1, 0)] * 1000
    return result


def scenario_saturated(target: Target, *, producers: int = 2, consumers: int = 2, count: int = 60_000,
                       size: int = 128, prefetch: int = 200, timeout: float = 90,
                       client_sndbuf: int = 0) -> dict[str, Any]:
    """Publishers faster than consumers: P producers with no rate cap -> 1 queue -> C consumers.
    Each body starts with its publish time; latency = receive time - that time, over every message.
    Rate = messages consumed / wall time (as pubsub). ``client_sndbuf``: the producers' fixed send
    buffer (0 = their kernel's sizing, which is where a held publisher's messages wait)."""
    tag = uuid.uuid4().hex[:8]
    qname = f"bench-sat-{tag}"
    conn, ch = _admin(target)
    ch.queue_declare(qname)
    out: mp.Queue = mp.Queue()
    per = count // producers
    total = per * producers
    deadline = time.time() + timeout
    shared = mp.Value("q", 0)
    cons = [mp.Process(target=consumer, args=(target, [qname], total, prefetch, deadline, out, True, shared))
            for _ in range(consumers)]
    prods = [mp.Process(target=producer, args=(target, "", [qname], b"x" * max(size, 24), per, False, False, 0, out,
                                               True, client_sndbuf)) for _ in range(producers)]
    _run(cons)
    start = time.perf_counter()
    _run(prods)
    results: list[tuple] = []
    peak_depth = 0  # the broker's ready count, sampled every 0.1 s: where its share of the wait is
    end = time.time() + timeout + 10
    while len(results) < producers + consumers and time.time() < end:
        try:
            results.append(out.get(timeout=0.1))
        except queue_mod.Empty:
            pass
        peak_depth = max(peak_depth, ch.queue_declare(qname, passive=True).method.message_count)
    wall = time.perf_counter() - start
    _join(cons + prods)
    ch.queue_delete(qname)
    conn.close()
    consumed = sum(r[1] for r in results if r[0] == "consumed")
    produced = sum(r[1] for r in results if r[0] == "produced")
    pub_time = max((r[2] for r in results if r[0] == "produced"), default=wall)
    lat = sorted(x for r in results if r[0] == "consumed" for x in r[3])
    result: dict[str, Any] = {"produced": produced, "consumed": consumed, "publish_rate": produced / pub_time,
                              "rate": consumed / wall, "complete": consumed == total, "peak_ready": peak_depth}
    if lat:
        result["p50_ms"] = lat[len(lat) // 2] * 1000
        result["p99_ms"] = lat[max(int(len(lat) * 0.99) - 1, 0)] * 1000
    return result


def scenario_confirms(target: Target, **kw: Any) -> dict[str, Any]:
    kw.setdefault("count", 10_000)
    kw.setdefault("producers", 4)
    return scenario_pubsub(target, persistent=True, confirms=True, durable=True, **kw)


def scenario_fanout(target: Target, *, queues: int = 10, count: int = 20_000, size: int = 128,
                    timeout: float = 60) -> dict[str, Any]:
    """1 producer -> fanout -> N queues, one consumer process per 5 queues. Rate = deliveries/s."""
    tag = uuid.uuid4().hex[:8]
    conn, ch = _admin(target)
    ex = f"bench-fan-{tag}"
    ch.exchange_declare(ex, "fanout", auto_delete=False)
    names = [f"bench-fan-{tag}-{i}" for i in range(queues)]
    for n in names:
        ch.queue_declare(n)
        ch.queue_bind(n, ex)
    out: mp.Queue = mp.Queue()
    groups = [names[i:i + 5] for i in range(0, queues, 5)]
    deadline = time.time() + timeout
    cons = [mp.Process(target=consumer, args=(target, g, count * len(g), 500, deadline, out)) for g in groups]
    prod = mp.Process(target=producer, args=(target, ex, [""], b"x" * size, count, False, False, 0, out))
    _run(cons)
    start = time.perf_counter()
    _run([prod])
    results = _collect(out, len(cons) + 1, timeout + 10)
    wall = time.perf_counter() - start
    _join(cons + [prod])
    for n in names:
        ch.queue_delete(n)
    ch.exchange_delete(ex)
    conn.close()
    delivered = sum(r[1] for r in results if r[0] == "consumed")
    return {"delivered": delivered, "rate": delivered / wall, "complete": delivered == count * queues}


def topic_patterns(n: int) -> list[str]:
    pats = []
    for i in range(n):
        kind = i % 4
        if kind == 0:
            pats.append(f"svc{i}.*.created")
        elif kind == 1:
            pats.append(f"svc{i}.#")
        elif kind == 2:
            pats.append(f"*.region{i}.*")
        else:
            pats.append(f"svc{i}.eu.updated")
    return pats


def reference_match(pattern: str, key: str) -> bool:
    def rec(p: list[str], k: list[str]) -> bool:
        if not p:
            return not k
        if p[0] == "#":
            return any(rec(p[1:], k[i:]) for i in range(len(k) + 1))
        if not k:
            return False
        return (p[0] == "*" or p[0] == k[0]) and rec(p[1:], k[1:])
    return rec(pattern.split("."), key.split("."))


def scenario_topic(target: Target, *, bindings: int = 1000, queues: int = 10, count: int = 20_000,
                   size: int = 64, timeout: float = 90) -> dict[str, Any]:
    """One topic exchange with ``bindings`` patterns spread over ``queues`` queues; keys chosen so
    each publish matches a few bindings. Delivered counts are checked against a reference matcher."""
    tag = uuid.uuid4().hex[:8]
    conn, ch = _admin(target)
    ex = f"bench-topic-{tag}"
    ch.exchange_declare(ex, "topic")
    names = [f"bench-topic-{tag}-{i}" for i in range(queues)]
    pats = topic_patterns(bindings)
    for n in names:
        ch.queue_declare(n)
    bind_start = time.perf_counter()
    impl = ch._impl  # noqa: SLF001
    for i, p in enumerate(pats):  # pipelined binds, then one round trip to wait for them
        impl.queue_bind(names[i % queues], ex, p, callback=lambda *_: None)
        if i % 1000 == 999:
            _flush(conn)
            conn.process_data_events(0)
    ch.queue_declare(names[0], passive=True)
    bind_time = time.perf_counter() - bind_start
    keys = [f"svc{(i * 7919) % bindings}.{'eu' if i % 2 else 'us'}.{'created' if i % 3 else 'updated'}"
            for i in range(64)]
    by_first: dict[str, list[int]] = {}
    for i, p in enumerate(pats):
        by_first.setdefault(p.split(".")[0], []).append(i)
    matched: dict[str, set[int]] = {}
    for key in keys:  # reference matcher, only over patterns whose first word can match
        cands = by_first.get(key.split(".")[0], []) + by_first.get("*", []) + by_first.get("#", [])
        matched[key] = {i % queues for i in cands if reference_match(pats[i], key)}
    expected_per_queue = [0] * queues
    for k_i in range(count):
        for q_i in matched[keys[k_i % len(keys)]]:
            expected_per_queue[q_i] += 1
    expected = sum(expected_per_queue)
    out: mp.Queue = mp.Queue()
    deadline = time.time() + timeout
    groups = [names[i:i + 5] for i in range(0, queues, 5)]
    cons = [mp.Process(target=consumer, args=(target, g, sum(expected_per_queue[names.index(n)] for n in g), 500,
                                              deadline, out)) for g in groups]
    prod = mp.Process(target=producer, args=(target, ex, keys, b"x" * size, count, False, False, 0, out))
    _run(cons)
    start = time.perf_counter()
    _run([prod])
    results = _collect(out, len(cons) + 1, timeout + 10)
    wall = time.perf_counter() - start
    _join(cons + [prod])
    for n in names:
        ch.queue_delete(n)
    ch.exchange_delete(ex)
    conn.close()
    delivered = sum(r[1] for r in results if r[0] == "consumed")
    pub = [r for r in results if r[0] == "produced"]
    return {"bindings": bindings, "bind_seconds": bind_time, "delivered": delivered, "expected": expected,
            "rate": delivered / wall, "publish_rate": pub[0][1] / pub[0][2] if pub else 0.0,
            "complete": delivered == expected}


def scenario_latency(target: Target, *, rate: float = 10_000, seconds: float = 5, size: int = 64,
                     timeout: float = 60) -> dict[str, Any]:
    """Fixed publish rate, one consumer; latency = consumer receive time - publish timestamp."""
    tag = uuid.uuid4().hex[:8]
    qname = f"bench-lat-{tag}"
    conn, ch = _admin(target)
    ch.queue_declare(qname)
    count = int(rate * seconds)
    out: mp.Queue = mp.Queue()
    deadline = time.time() + timeout
    cons = mp.Process(target=consumer, args=(target, [qname], count, 500, deadline, out, True))
    prod = mp.Process(target=producer, args=(target, "", [qname], b"x" * max(size, 24), count, False, False, rate, out))
    _run([cons])
    _run([prod])
    results = _collect(out, 2, timeout + 10)
    _join([cons, prod])
    ch.queue_delete(qname)
    conn.close()
    lat = next((r[3] for r in results if r[0] == "consumed"), [])
    lat.sort()
    if not lat:
        return {"p50_ms": None, "p99_ms": None, "received": 0}
    return {"p50_ms": lat[len(lat) // 2] * 1000, "p99_ms": lat[int(len(lat) * 0.99) - 1] * 1000,
            "received": len(lat), "complete": len(lat) == count}


def rss_of(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def scenario_backlog(target: Target, *, count: int = 1_000_000, size: int = 256, producers: int = 2,
                     broker_pid: int | None = None, timeout: float = 600, persistent: bool = False) -> dict[str, Any]:
    """Publish ``count`` messages with no consumer (publish rate, peak broker RSS), then drain.
    ``persistent``: a durable queue and delivery_mode 2, so the store's index is in the figure too."""
    tag = uuid.uuid4().hex[:8]
    qname = f"bench-backlog-{tag}"
    conn, ch = _admin(target)
    ch.queue_declare(qname, durable=persistent)
    out: mp.Queue = mp.Queue()
    per = count // producers
    peak = 0
    prods = [mp.Process(target=producer, args=(target, "", [qname], b"x" * size, per, persistent, False, 0, out))
             for _ in range(producers)]
    start = time.perf_counter()
    _run(prods)
    done: list[tuple] = []
    while len(done) < producers and time.perf_counter() - start < timeout:
        try:
            done.append(out.get(timeout=0.5))
        except queue_mod.Empty:
            pass
        if broker_pid:
            peak = max(peak, rss_of(broker_pid))
    pub_wall = time.perf_counter() - start
    _join(prods)
    depth = 0
    while depth < per * producers and time.perf_counter() - start < timeout:  # broker may still be applying
        depth = ch.queue_declare(qname, passive=True).method.message_count
        if broker_pid:
            peak = max(peak, rss_of(broker_pid))
    drain_start = time.perf_counter()
    cons = mp.Process(target=consumer, args=(target, [qname], depth, 1000, time.time() + timeout, out))
    _run([cons])
    while True:
        try:
            r = out.get(timeout=0.5)
            break
        except queue_mod.Empty:
            if broker_pid:
                peak = max(peak, rss_of(broker_pid))
    drain_wall = time.perf_counter() - drain_start
    _join([cons])
    ch.queue_delete(qname)
    conn.close()
    return {"count": per * producers, "persistent": persistent, "publish_rate": per * producers / pub_wall,
            "depth": depth,
            "drained": r[1], "drain_rate": r[1] / drain_wall, "peak_rss_mb": peak / 2**20}


SCENARIOS = {
    "pubsub": scenario_pubsub,
    "saturated": scenario_saturated,
    "confirms": scenario_confirms,
    "fanout": scenario_fanout,
    "topic": scenario_topic,
    "latency": scenario_latency,
    "backlog": scenario_backlog,
}


def summarize(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def cpu_count() -> int:
    return os.cpu_count() or 1
