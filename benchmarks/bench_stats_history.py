"""What the management API's rate history costs: memory per 10,000 queues, and a tick's time.

    .venv/bin/python benchmarks/bench_stats_history.py [--queues 10000] [--busy-minutes 60] [--runs 3]

Method, in one process, with the broker's own parts (no sockets): a ``Broker`` with N idle queues
declared, the way the HTTP API's sampler runs (``server/http/sampler.py`` on RabbitMQ's default
retention: 605 s at 5 s and 3600 s at 60 s for queues). Memory is measured twice: tracemalloc's
count of what the history allocates (started after the queues, so only the history is traced),
and RSS (VmRSS) growth. Three states:

- *without history*: the broker and its N queues only;
- *idle*: after one tick, as after any number of ticks when nothing changes (a row is stored only
  when its values changed): each queue's series (its message counters and depths) holds one row
  per level;
- *busy*: the worst case, every queue's counters and depth different at every tick for
  ``--busy-minutes`` of 5-s ticks, so each level's ring fills (121 rows at 5 s, 61 at 60 s, per
  series of 12 values). These are recorded into the history directly (``History.record``, what
  the sampler calls for each queue), with values that change each time: the figure is the
  history's, not that of N x ticks messages a real load would need to make them change. Measured
  untraced (tracemalloc would make those millions of records several times slower): RSS growth,
  and the sizes (``sys.getsizeof``) of the history's own objects: the series dict, each series,
  its levels list and arrays (the key tuples, shared with the sampler's, not counted).

A tick's time is the median CPU time (``process_time``) of ``StatsSampler.sample`` over the real
broker's N queues, untraced: ``--ticks`` ticks after the first, each with every queue's publish
and ack counters moved since the last (the walk over every queue, the comparison with its last
row and a new row), which runs on the event loop every 5 s, and the longest of its slices
(``SLICE`` objects, one turn of the loop each: what one turn holds up the other tasks), median
and longest, after ``gc.freeze()`` as ``headrace serve`` does once serving.
Figures are medians over ``--runs`` fresh runs (a fresh broker each).
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from shell_ports import shell_ports  # noqa: E402  (the unit tests' stand-in of the shell)

from headrace.server.broker import Broker  # noqa: E402
from headrace.server.http.history import History, Policy  # noqa: E402
from headrace.server.http.sampler import SLICE, StatsSampler  # noqa: E402

GLOBAL = Policy(((605, 5), (3660, 60), (29400, 600), (86400, 1800)))  # RabbitMQ's defaults
BASIC = Policy(((605, 5), (3600, 60)))
T0 = 1_800_000_000.0  # a time on the 5-s grid


def rss() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def one_run(queues: int, busy_ticks: int, ticks_n: int) -> dict[str, float]:
    broker = Broker(ports=shell_ports())
    vhost = broker.add_vhost("/")
    for i in range(queues):
        vhost.declare_queue(f"q{i}", now=T0, owner=None)
    gc.collect()
    rss0 = rss()
    tracemalloc.start()
    history = History(GLOBAL, BASIC)
    sampler = StatsSampler(broker, history, lambda: {})
    sampler.sample(T0)
    gc.collect()
    idle_traced = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    rss_idle = rss()
    # as ``headrace serve`` does once serving (server/app.py, tune_gc): what start-up made is out of
    # the collector's sight, so a collection inside a slice is not a walk over every queue
    gc.freeze()
    ticks: list[float] = []
    slices: list[float] = []
    qs = list(vhost.queues.values())
    for k in range(1, ticks_n + 1):
        for q in qs:  # the queue's own counters, moved as its traffic would
            q.stats.published += 1
            q.stats.acked += 1
        whole = 0.0
        walk = sampler.walk(T0 + 5 * k)
        while True:  # a slice per turn of the event loop (``deadline_due``)
            t = time.process_time()  # CPU time: the machine is shared, wall time would count others'
            more = next(walk, False) is None
            took = time.process_time() - t
            whole += took
            slices.append(took)
            if not more:
                break
        ticks.append(whole)
    # the worst case: every series different at every tick until each level is full (untraced:
    # tracemalloc would make these millions of records several times slower; RSS and the sizes of
    # the history's own objects tell the cost)
    del history, sampler, broker, vhost, qs
    gc.unfreeze()
    gc.collect()
    rss_before = rss()
    busy = History(GLOBAL, BASIC)
    owners = [object() for _ in range(queues)]
    keys = [("queue", "/", f"q{i}") for i in range(queues)]
    for k in range(busy_ticks):
        at = int(T0 * 1000) + 5000 * k
        fresh: dict = {}
        for key, owner in zip(keys, owners):
            busy.record(fresh, key, owner, at, (k,) * 12)
        busy.replace(fresh, at)
    gc.collect()
    busy_rss = rss() - rss_before
    busy_sizes = sys.getsizeof(busy.series) + sum(
        sys.getsizeof(s) + sys.getsizeof(s.levels) + sum(sys.getsizeof(a) for a in s.levels)
        for s in busy.series.values())
    per = 10_000 / queues
    return {"idle_traced": idle_traced * per, "idle_rss": (rss_idle - rss0) * per, "busy_rss": busy_rss * per,
            "busy_sizes": busy_sizes * per,
            "tick_ms": statistics.median(ticks) * 1000 * per, "slice_ms": statistics.median(slices) * 1000,
            "slice_max_ms": max(slices) * 1000}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--queues", type=int, default=10_000)
    parser.add_argument("--busy-minutes", type=int, default=60)
    parser.add_argument("--ticks", type=int, default=24)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    runs = [one_run(args.queues, args.busy_minutes * 12 + 12, args.ticks) for _ in range(args.runs)]
    med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    print(f"{args.queues} queues, {args.busy_minutes} min of busy 5-s ticks, median of {args.runs} runs, "
          "scaled to 10,000 queues:")
    print(f"  idle history:  {med['idle_traced'] / 2**20:.1f} MiB traced, {med['idle_rss'] / 2**20:.1f} MiB RSS "
          f"({med['idle_traced'] / 10_000:.0f} B a queue)")
    print(f"  busy history:  {med['busy_rss'] / 2**20:.1f} MiB RSS, {med['busy_sizes'] / 2**20:.1f} MiB in its objects "
          f"({med['busy_sizes'] / 10_000:.0f} B a queue)")
    print(f"  a tick:        {med['tick_ms']:.1f} ms CPU with every queue's counters moved, in slices of "
          f"{SLICE} objects: {med['slice_ms']:.1f} ms each (median), the longest {med['slice_max_ms']:.1f} ms")
    for r in runs:
        print("  run:", ", ".join(f"{k} {v:,.1f}" for k, v in r.items()))


if __name__ == "__main__":
    main()
