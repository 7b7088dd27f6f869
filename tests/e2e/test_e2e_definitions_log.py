"""Durable definitions survive a kill -9 in the middle of a declare storm: every declare, bind and
delete the broker answered is there after the restart (the answer waits for the log's fsync),
whatever the log's tail held when the process died."""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass, field
from urllib.parse import quote

import httpx
import pika
import pytest

from e2e_support import unique, wait_until

pytestmark = pytest.mark.timeout(120)

WORKERS = 3
# a small compaction bound, so the storm also compacts the log while it runs
BROKER_ENV = {"HEADRACE_DEFINITIONS_LOG_MIN_BYTES": "8192"}


@dataclass
class Answered:
    """What the broker confirmed to one client before it died (each worker fills its own)."""
    declared: list[str] = field(default_factory=list)
    bound: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    count: int = 0
    in_flight: str = ""  # the queue the unanswered operation was about when the broker died


def storm(url: str, prefix: str, answered: Answered, stop: threading.Event) -> None:
    try:
        conn = pika.BlockingConnection(pika.URLParameters(url))
        ch = conn.channel()
        i = 0
        while not stop.is_set():
            name = answered.in_flight = f"{prefix}-{i}"
            ch.queue_declare(name, durable=True)
            answered.declared.append(name)
            ch.queue_bind(name, "amq.topic", routing_key=name)
            answered.bound.append(name)
            if i % 4 == 3:  # some deletes too: a queue deleted and answered must stay deleted
                gone = answered.in_flight = f"{prefix}-{i - 2}"
                ch.queue_delete(gone)
                answered.deleted.append(gone)
            answered.count += 1
            i += 1
    except (pika.exceptions.AMQPError, OSError):
        return  # the broker was killed under us


def listed(proc, what: str) -> list[dict]:
    resp = httpx.get(f"{proc.http_url}/api/{what}/{quote('/', safe='')}", auth=("guest", "guest"), timeout=30)
    resp.raise_for_status()
    return resp.json()


def test_answered_definitions_survive_kill_minus_nine_mid_storm(broker_factory):
    proc = broker_factory(env=BROKER_ENV)
    prefix = unique("storm")
    stop = threading.Event()
    answered = [Answered() for _ in range(WORKERS)]
    threads = [threading.Thread(target=storm, args=(proc.url, f"{prefix}-{w}", answered[w], stop), daemon=True)
               for w in range(WORKERS)]
    for t in threads:
        t.start()
    target = random.randint(60, 240)  # kill at a different point of the storm each run
    assert wait_until(lambda: sum(a.count for a in answered) >= target, timeout=60)
    proc.kill()  # SIGKILL while the workers are declaring
    stop.set()
    for t in threads:
        t.join(30)
    proc = broker_factory(data_dir=proc.data_dir, env=BROKER_ENV)
    queues = {q["name"] for q in listed(proc, "queues")}
    bindings = {(b["source"], b["destination"], b["routing_key"]) for b in listed(proc, "bindings")}
    checked = 0
    for a in answered:
        deleted = set(a.deleted)
        for name in a.declared:
            if name != a.in_flight:  # what was in flight at the kill may or may not have happened
                assert (name in queues) is (name not in deleted), name
                checked += 1
        for name in a.bound:
            if name not in deleted and name != a.in_flight:
                assert ("amq.topic", name, name) in bindings, name
    assert checked >= target - WORKERS
    # nothing that was never declared, not even a half-written record
    every = {n for a in answered for n in a.declared} | {a.in_flight for a in answered}
    assert {q for q in queues if q.startswith(prefix)} <= every
    # and the log goes on after the restart: a new declare survives a second kill
    conn = pika.BlockingConnection(pika.URLParameters(proc.url))
    conn.channel().queue_declare(f"{prefix}-after", durable=True)
    conn.close()
    proc.kill()
    proc = broker_factory(data_dir=proc.data_dir, env=BROKER_ENV)
    assert f"{prefix}-after" in {q["name"] for q in listed(proc, "queues")}
