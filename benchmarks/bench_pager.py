"""Draining a spilled queue while many other queues exist: what the pager's wake-ups cost.

    .venv/bin/python benchmarks/bench_pager.py [--queues 100000] [--messages 300000] [--resident 10000]

In one process: a broker with a real spill directory and the real ``Pager`` task under trio, as
the shell runs them. ``--queues`` idle queues are declared, then one queue gets ``--messages``
messages of 200 bytes with a resident window of ``--resident`` (so nearly all of them are spilled to
disk), and a consumer with a prefetch of 1,000 drains it, acking each delivery batch at once (a
client that keeps up). The pager pages the queue back in as it runs low. Prints one JSON line: the
drain's seconds and messages per second, and the pager's wake-ups.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

from headrace.persistence.spill_store import SpillStore
from headrace.queues import Consumer
from headrace.server.amqp.properties import BasicProperties, encode_properties
from headrace.server.broker import Broker, Settle
from headrace.server.net.alarms import DiskWatch
from headrace.server.net.pager import Pager

from bench_core import idle_ports


class _Sink:
    def __init__(self) -> None:
        self.got: list[tuple[Any, Any]] = []

    def has_capacity(self) -> bool:
        return True

    def deliver(self, consumer: Any, queue: Any, entry: Any, now: float) -> None:
        self.got.append((queue, entry))

    def consumer_cancelled(self, consumer: Any) -> None:
        pass


async def drain(args: argparse.Namespace, data: Path) -> dict[str, Any]:
    pager: Pager | None = None  # made once the backlog is in, as before: no wake counted while publishing
    wakes = 0

    def counted(key: Any) -> None:
        nonlocal wakes
        if pager is not None:
            wakes += 1
            pager.wake(key)

    spill = SpillStore(data / "spill", on_page_wanted=counted)
    broker = Broker(ports=idle_ports(), resident_max_messages=args.resident,
                    spill_factory=lambda vhost, queue: spill.backing(f"{vhost}\x00{queue}", (vhost, queue)))
    broker.ensure_default("/", "guest", "guest")
    vhost = broker.vhosts["/"]
    for i in range(args.queues):
        vhost.declare_queue(f"idle-{i}", owner=None, now=0.0)
    queue = vhost.declare_queue("backlog", owner=None, now=0.0)
    props = encode_properties(BasicProperties())
    body = b"x" * 200
    for _ in range(args.messages):
        broker.delivery.publish(vhost, "", "backlog", props, body, 0.0)
    pager = Pager(spill, DiskWatch(data, 0))
    sink = _Sink()
    delivered = 0
    async with trio.open_nursery() as nursery:
        nursery.start_soon(pager.run, broker)
        t0 = time.perf_counter()
        broker.delivery.add_consumer(vhost, queue, Consumer("c", sink, prefetch=1000), time.time())
        while delivered < args.messages:
            got, sink.got = sink.got, []
            delivered += len(got)
            broker.delivery.settle(vhost, got, Settle.ACK, time.time())
            await trio.sleep(0)  # the pager's turn, as other tasks get theirs in the broker
        seconds = time.perf_counter() - t0
        nursery.cancel_scope.cancel()
    spill.close()
    return {"queues": args.queues, "messages": args.messages, "resident": args.resident,
            "drain_s": round(seconds, 2), "rate": round(args.messages / seconds), "wake_calls": wakes}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--queues", type=int, default=100_000)
    ap.add_argument("--messages", type=int, default=300_000)
    ap.add_argument("--resident", type=int, default=10_000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        print(json.dumps(trio.run(drain, args, Path(tmp))))


if __name__ == "__main__":
    main()
