"""A consumer group of 3 member processes over a 12-partition super stream, under load: a member
joins then leaves cleanly (SIGTERM: it closes its connection), another is killed (SIGKILL) and
another joins while messages flow; nothing is lost, only what the killed member had not acked
comes again, and each member sees each key in order."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
from collections import defaultdict

import httpx
import pika
import pytest
from e2e_support import unique, wait_until

pytestmark = pytest.mark.timeout(120)

PARTITIONS = 12


def member(url: str, name: str, group: str, me: int, out: mp.SimpleQueue) -> None:
    """Consume every partition as a group member; report each delivery before acking it, on a
    SimpleQueue of its own: it writes to its pipe at once (a report buffered in a Queue's feeder
    thread would die with a killed member whose ack reached the broker, and the message would look
    lost), and a member killed while holding the queue's write lock blocks no other member."""
    conn = pika.BlockingConnection(pika.URLParameters(url))
    ch = conn.channel()
    ch.basic_qos(prefetch_count=20)
    args = {"x-single-active-consumer": True, "x-stream-consumer-name": group, "x-stream-offset": "first",
            "x-super-stream": name}

    def handler(stream: str):
        def on_message(chan, method, props, body):
            out.put((me, stream, body.decode()))
            chan.basic_ack(method.delivery_tag)
        return on_message

    leaving = []
    signal.signal(signal.SIGTERM, lambda *_: leaving.append(True))
    for i in range(PARTITIONS):
        stream = f"{name}-{i}"
        ch.basic_consume(stream, handler(stream), arguments=args, consumer_tag=f"m{me}-{i}")
    out.put((me, None, "ready"))
    while not leaving:
        conn.process_data_events(0.05)
    conn.close()  # a clean leave: every delivery it reported is acked before the close


def start(broker, name: str, group: str, me: int, outs: dict[int, mp.SimpleQueue]) -> mp.Process:
    out = outs[me] = mp.get_context("fork").SimpleQueue()
    proc = mp.get_context("fork").Process(target=member, args=(broker.url, name, group, me, out), daemon=True)
    proc.start()
    return proc


def test_group_members_killed_and_joining_under_load(broker):
    name, group = unique("grp-ss"), unique("grp")
    http = httpx.Client(base_url=broker.http_url, auth=("guest", "guest"), timeout=10)
    assert http.put(f"/api/super-streams/%2F/{name}", json={"partitions": PARTITIONS}).status_code == 201
    outs: dict[int, mp.SimpleQueue] = {}
    got: list[tuple[int, str, str]] = []
    ready: set[int] = set()

    def drain() -> None:
        for out in outs.values():
            while not out.empty():
                me, stream, body = out.get()
                if stream is None:
                    ready.add(me)
                else:
                    got.append((me, stream, body))

    procs = {}
    for me in range(3):  # one after the other: the order they came decides the spread
        procs[me] = start(broker, name, group, me, outs)
        assert wait_until(lambda: (drain(), me in ready)[1], timeout=20)

    def active_per_member() -> dict[str, int]:
        counts: dict[str, int] = defaultdict(int)
        for i in range(PARTITIONS):
            for c in http.get(f"/api/queues/%2F/{name}-{i}").json()["stream"]["consumers"]:
                if c["active"]:
                    counts[c["consumer_tag"].split("-")[0]] += 1
        return dict(counts)

    assert active_per_member() == {"m0": 4, "m1": 4, "m2": 4}
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    ch = conn.channel()
    ch.confirm_delivery()
    keys = [f"key-{k}" for k in range(40)]
    sent = []
    try:
        for n in range(30):
            for key in keys:
                body = f"{key}/{n}"
                ch.basic_publish(name, key, body.encode())
                sent.append(body)
            drain()
            if n == 4:  # a fourth member joins mid-flow ...
                procs[4] = start(broker, name, group, 4, outs)
            if n == 14:  # ... and leaves cleanly: its partitions move back
                os.kill(procs[4].pid, signal.SIGTERM)
                procs[4].join(10)
                assert procs[4].exitcode == 0
            if n == 10:  # killed mid-flow: its socket closes, nothing is cancelled
                os.kill(procs[1].pid, signal.SIGKILL)
                procs[1].join(10)
            if n == 20:  # a new member joins mid-flow
                procs[3] = start(broker, name, group, 3, outs)
        assert wait_until(lambda: (drain(), {b for _, _, b in got} >= set(sent))[1], timeout=30), \
            sorted(set(sent) - {b for _, _, b in got})[:20]
        assert wait_until(lambda: active_per_member() == {"m0": 4, "m2": 4, "m3": 4}, timeout=10), active_per_member()
        drain()
        counts: dict[str, list[int]] = defaultdict(list)
        for me, _, body in got:
            counts[body].append(me)
        twice = {body: who for body, who in counts.items() if len(who) > 1}
        # only what the killed member was sent (and may not have acked) is delivered again
        assert all(1 in who for who in twice.values()), twice
        assert {me for me, _, _ in got} == {0, 1, 2, 3, 4}  # each member read partitions while it was in
        for me in (0, 2, 3, 4):  # each member sees each key in order
            per_key: dict[str, list[int]] = defaultdict(list)
            for who, _, body in got:
                if who == me:
                    key, n = body.split("/")
                    per_key[key].append(int(n))
            assert all(seq == sorted(seq) for seq in per_key.values()), me
        homes = defaultdict(set)
        for _, stream, body in got:
            homes[body.split("/")[0]].add(stream)
        assert all(len(streams) == 1 for streams in homes.values())  # a key stays in its partition
    finally:
        conn.close()
        http.close()
        for proc in procs.values():
            if proc.is_alive():
                proc.kill()
                proc.join(10)
