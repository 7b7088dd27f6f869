"""The sampler: every object's counters into the rate history, on the broker's clock.

Owner: ``StatsSampler`` is the one writer of its ``History`` (``history.py``). It is a ``Timer`` in
the broker's deadline heap (``broker/deadlines.py``), the one the clock task sleeps on, as a
connection's consumer timeout is: each tick samples and arms the next at the following multiple of
the finest interval of the retention policies (5 s by default), so samples fall on RabbitMQ's grid
whatever the load, and nothing wakes in between. Synchronous and given ``now``, as all domain code:
unit tests drive it with explicit times.

One tick walks every vhost, queue, exchange, connection and channel once and records one row of
each: the families the API shows, one after the other (``rates.py`` names them and where each
starts); an object gone since the last tick loses its
history, and an object replaced under the same name starts a new one. The counters are the ones the
broker keeps anyway: nothing is added to the message path. A tick walks ``SLICE`` objects per turn
of the event loop (a generator keeps its place, and the sums it carries, between turns), every row
stamped with the tick's time; the history takes them all at once at the end, so a reader never
sees half a tick.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from headrace.server.broker import Broker
from headrace.server.broker.deadlines import Deadlines

from .history import History, Key, Series
from .node_facts import churn_counts, store_io_counts
from .rates import QUEUE_STATS, VHOST_STATS, queue_counts, vhost_counts_from

__all__ = ["NODE_GAUGES", "StatsSampler"]

# the node's gauges the broker keeps (the shell samples them into it); descriptors and processes
# are read from /proc per request and have no history
NODE_GAUGES = ("mem_used", "sockets_used", "disk_free")


# objects recorded per turn of the event loop: a tick over 10,000 queues is a few turns of a few
# milliseconds each instead of one stall of tens (benchmarks/RESULTS.md, "Rate history")
SLICE = 500


class StatsSampler:
    __slots__ = ("broker", "history", "deadlines", "store_io", "_walk")

    def __init__(self, broker: Broker, history: History, store_io: Callable[[], dict[str, int]]) -> None:
        self.broker = broker
        self.history = history
        self.deadlines: Deadlines = broker.delivery.deadlines
        self.store_io = store_io  # the message store's I/O counts (ints its flusher thread keeps)
        self._walk: Iterator[None] | None = None  # the tick under way, between its slices

    def start(self, now: float) -> None:
        """The first tick at the next multiple of the interval."""
        self.deadlines.arm(self, self._next(now))

    def deadline_due(self, now: float) -> None:
        """One slice of the tick: the next is due at once (the clock lets the other tasks run
        between), and after the last slice the next tick on the grid."""
        if self._walk is None:
            self._walk = self.walk(now)
        for _ in self._walk:
            self.deadlines.arm(self, now)
            return
        self._walk = None
        self.deadlines.arm(self, self._next(now))

    def _next(self, now: float) -> float:
        tick = self.history.tick_ms
        return (int(now * 1000) // tick + 1) * tick / 1000

    def sample(self, now: float) -> None:
        """A whole tick at once (tests, benchmarks)."""
        for _ in self.walk(now):
            pass

    def walk(self, now: float) -> Iterator[None]:
        """Record a row of every object at ``now`` (on the tick's grid), yielding every ``SLICE``
        objects; the history takes the new rows when the walk is done."""
        h = self.history
        at = int(now * 1000) // h.tick_ms * h.tick_ms
        fresh: dict[Key, Series] = {}
        record = h.record
        b = self.broker
        done = 0
        octets: dict[str, list[int]] = {}
        for s in list(b.connections.values()):
            if getattr(s, "user", None) is None:
                continue
            io = s.io
            record(fresh, ("connection", s.id), s, at, (io.recv_oct, io.send_oct))
            sums = octets.setdefault(s.vhost.name, [0, 0])
            sums[0] += io.recv_oct
            sums[1] += io.send_oct
            for ch in list(s.channels.values()):
                record(fresh, ("channel", s.id, ch.id), ch, at, ch.stats.counts(ch.next_tag - 1))
            done += 1 + len(s.channels)
            if done >= SLICE:
                done = 0
                yield
        overview = [0] * len(VHOST_STATS)
        all_ready = all_unacked = 0
        for v in list(b.vhosts.values()):
            name = v.name
            rows: list[tuple[int, ...]] = []
            for q in list(v.queues.values()):
                ready, unacked = q.messages_ready, q.messages_unacked
                row = (*queue_counts(q.stats), ready + unacked, ready, unacked)
                rows.append(row)
                record(fresh, ("queue", name, q.name), q, at, row)
                done += 1
                if done >= SLICE:
                    done = 0
                    yield
            for x, ex in list(v.exchanges.items()):
                record(fresh, ("exchange", name, x), ex, at, (ex.published_in, ex.published_out))
            done += len(v.exchanges)
            # the vhost's sums of its queues' columns (counters, then depths)
            sums = [sum(column) for column in zip(*rows)] or [0] * (len(QUEUE_STATS) + 3)
            v_ready, v_unacked = sums[-2], sums[-1]
            vcounts = vhost_counts_from(v, sums[:len(QUEUE_STATS)])
            for i, c in enumerate(vcounts):
                overview[i] += c
            all_ready += v_ready
            all_unacked += v_unacked
            recv, send = v.octets_closed
            live = octets.get(name, (0, 0))
            record(fresh, ("vhost", name), v, at,
                   (*vcounts, v_ready + v_unacked, v_ready, v_unacked, recv + live[0], send + live[1]))
        record(fresh, ("overview",), h, at, (*overview, all_ready + all_unacked, all_ready, all_unacked))
        record(fresh, ("churn",), b.counters, at, churn_counts(b.counters))
        record(fresh, ("node",), b, at,
               (b.memory_rss or b.memory_used, len(b.connections), b.disk_free, *store_io_counts(self.store_io())[1]))
        h.replace(fresh, at)
