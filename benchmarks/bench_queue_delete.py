"""Deleting many bound queues: what one queue's deletion costs as the queues and bindings grow.

    .venv/bin/python benchmarks/bench_queue_delete.py [--queues 10000] [--bindings-per-queue 10] [--exchanges 1]

In one process, no sockets: a broker's default vhost gets ``--exchanges`` topic exchanges and
``--queues`` exclusive queues, each of its own connection (an owner object, as a session is) and
bound ``--bindings-per-queue`` times (spread over the exchanges); then every connection closes as a
session does (its exclusive queues found and deleted), as when thousands of consumers disconnect
at once. Prints one JSON line: the seconds for all the closes and the microseconds per queue.
"""

from __future__ import annotations

import argparse
import json
import time

from headrace.exchanges import DestinationKind
from headrace.server.broker.core import Broker

from bench_core import idle_ports


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--queues", type=int, default=10_000)
    ap.add_argument("--bindings-per-queue", type=int, default=10)
    ap.add_argument("--exchanges", type=int, default=1)
    args = ap.parse_args()
    broker = Broker(ports=idle_ports())
    broker.ensure_default("/", "guest", "guest")
    vhost = broker.vhosts["/"]
    for e in range(args.exchanges):
        vhost.declare_exchange(f"ex{e}", "topic")
    owners = [object() for _ in range(args.queues)]
    for i, owner in enumerate(owners):
        vhost.declare_queue(f"q{i}", owner=owner, now=0.0, exclusive=True)
        for j in range(args.bindings_per_queue):
            vhost.bind(f"ex{(i + j) % args.exchanges}", f"q{i}", DestinationKind.QUEUE, f"svc{i}.{j}.*", None)
    t0 = time.perf_counter()
    for owner in owners:
        for name in vhost.owned_queues(owner):
            vhost.delete_queue(name)
    seconds = time.perf_counter() - t0
    print(json.dumps({"queues": args.queues, "bindings_per_queue": args.bindings_per_queue,
                      "exchanges": args.exchanges, "delete_all_s": round(seconds, 2),
                      "us_per_queue": round(seconds / args.queues * 1e6)}))


if __name__ == "__main__":
    main()
