"""What waking paused readers costs the event loop: a broadcast to all, or a release to one queue's.

    .venv/bin/python benchmarks/bench_gate.py [--readers 2,100,1000] [--releases 500]

Under trio, ``N`` reader tasks wait on a ``Gate``, each held by its own saturated queue, and wait
again as soon as they are woken (as a reader still held does). Then ``--releases`` queue releases
are made, each followed by the scheduler running whatever it woke: once as ``notify`` (what every
release was: all ``N`` readers wake) and once as ``released(queue)`` (the one reader it held).
Prints one JSON line per ``N``: milliseconds of loop per release each way.
"""

from __future__ import annotations

import argparse
import json
import time

import trio
import trio.testing

from headrace.server.net.gate import Gate


async def per_release(readers: int, releases: int, broadcast: bool) -> float:
    gate = Gate()
    queues = [object() for _ in range(readers)]

    async def reader(queue: object) -> None:
        while True:
            await gate.wait_changed(None if broadcast else queue)

    async with trio.open_nursery() as nursery:
        for queue in queues:
            nursery.start_soon(reader, queue)
        await trio.testing.wait_all_tasks_blocked()
        t0 = time.perf_counter()
        for i in range(releases):
            if broadcast:
                gate.notify()
            else:
                gate.released(queues[i % readers])
            await trio.testing.wait_all_tasks_blocked()
        seconds = (time.perf_counter() - t0) / releases
        nursery.cancel_scope.cancel()
    return seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--readers", default="2,100,1000")
    ap.add_argument("--releases", type=int, default=500)
    args = ap.parse_args()
    for n in (int(x) for x in args.readers.split(",")):
        broadcast = trio.run(per_release, n, args.releases, True)
        targeted = trio.run(per_release, n, args.releases, False)
        print(json.dumps({"paused_readers": n, "broadcast_ms": round(broadcast * 1e3, 3),
                          "released_ms": round(targeted * 1e3, 3)}))


if __name__ == "__main__":
    main()
