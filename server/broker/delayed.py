"""Messages held by ``x-delayed-message`` exchanges until their ``x-delay`` is due.

Rule 1: the ``VHost`` owns one ``DelayedMessages``; only its publish path adds, recovery adds, and
the delivery owner's tick pops (at ``next_due``, armed in the one deadline heap, ``deadlines.py``).
Every method takes ``now``; none reads a clock.

Why a spilled schedule: RabbitMQ's plugin keeps every delayed message in one Mnesia table and
drifts or runs out of memory near a million of them. Here only the near horizon is in memory: a
heap keyed by (due time, arrival order), so equal due times keep publish order, of the messages
due within ``HORIZON`` seconds. The rest wait in bucket files (``persistence/delay_buckets.py``),
a hierarchical timing wheel on disk: level ``L`` buckets are ``WIDTHS[L]`` seconds wide, and a
message goes to the lowest level whose span (16 of its buckets) reaches its due time. A level-0
bucket is read into the heap ``HORIZON`` seconds before it starts; a higher one is cascaded (read
and placed again, one level down) ``WIDTHS[L]`` seconds before it starts. A tick reads at most
``read_bytes`` (``CHUNK_BYTES`` by default) of all buckets whose time has come, oldest first, and
the next tick follows at once while more are due, so a large bucket never stalls the loop. Each
message is written at most once per level, and memory holds the heap, a few hundred buckets'
counters and the write buffers (bounded, ``delay_buckets.FLUSH_ALL_BYTES``), whatever the number
scheduled.

Recovery (``add_recovered``) places a batch at a time, and puts a message due already (due while
the broker was down) in a level-0 bucket whose time has come rather than in the heap: millions
overdue are then read back ``read_bytes`` a tick, published as they come, oldest bucket (second)
first; within one second, a bucket larger than a tick's read comes out in the order of its
chunks, each chunk in (due, publish) order. Nothing comes out before its due time.

The operator's view (``schedule``) counts messages per exchange by the minute of their due time:
one counter per exchange and minute, so its size follows the span of due times, not their number.
"""

from __future__ import annotations

import hashlib
import heapq
import itertools
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from headrace.persistence.delay_buckets import HEAD, DelayBuckets, DelayRecord, decode, encode
from headrace.persistence.store_ops import DelayRow

__all__ = ["DELAYED_TYPE", "DelayedMessage", "DelayedMessages", "HISTOGRAM_EDGES", "spill_dir"]

DELAYED_TYPE = "x-delayed-message"

HORIZON = 2.0  # seconds ahead that are held in memory
WIDTHS = (1, 16, 256, 4096, 65536)  # bucket width per level, seconds (the top level has no end)
CHUNK_BYTES = 4 << 20  # read from bucket files in one tick, at most (at least one record): the default
SPANS = tuple(16 * w for w in WIDTHS)  # how far ahead each level reaches
# the schedule's bins, in seconds from now: due within 1 min, 5 min, 15 min, 1 h, 6 h, 1 day, 7 days, later
HISTOGRAM_EDGES = (60, 300, 900, 3600, 21600, 86400, 604800)


@dataclass(order=True, slots=True)
class DelayedMessage:
    due: float
    order: int
    exchange: str = field(compare=False)
    routing_key: str = field(compare=False)
    props_raw: bytes = field(compare=False)
    body: bytes = field(compare=False)
    message_id: int = field(compare=False, default=0)  # store id when persistent, else 0


@dataclass(slots=True)
class _Bucket:
    level: int
    index: int
    count: int = 0
    by_exchange: dict[str, int] = field(default_factory=dict)
    offset: int = 0  # bytes of the file already taken back (a cascade in progress)

    @property
    def name(self) -> str:
        return f"{self.level}-{self.index}"


def spill_dir(base: Path, vhost: str) -> Path:
    """A vhost's bucket directory under ``base``, for any vhost name: its bytes in hex, or their
    SHA-1 where that would be longer than a file name may be."""
    raw = vhost.encode()
    return base / (raw.hex() if len(raw) <= 100 else "sha1-" + hashlib.sha1(raw).hexdigest())


def _action(level: int, index: int) -> float:
    """When bucket (level, index) must be read: into the heap (level 0) or one level down."""
    start = index * WIDTHS[level]
    return start - (HORIZON if level == 0 else WIDTHS[level])


class DelayedMessages:
    __slots__ = ("_heap", "_order", "_files", "_buckets", "_actions", "_minutes", "_totals", "_read_bytes")

    def __init__(self, directory: Path | None = None, *, read_bytes: int = CHUNK_BYTES) -> None:
        """``directory``: where bucket files go (None: everything stays in the heap, as where no
        data directory exists); ``read_bytes``: how much of them a tick reads back at most."""
        self._read_bytes = read_bytes
        self._heap: list[DelayedMessage] = []
        self._order = itertools.count()
        self._files = DelayBuckets(directory) if directory is not None else None
        self._buckets: dict[tuple[int, int], _Bucket] = {}
        self._actions: list[tuple[float, int, int]] = []  # (action time, level, index), one per bucket
        self._minutes: dict[tuple[str, int], int] = {}  # (exchange, due minute) -> messages
        self._totals: dict[str, int] = {}  # exchange -> messages

    # ------------------------------------------------------------------ adding
    def add(self, due: float, exchange: str, routing_key: str, props_raw: bytes, body: bytes,
            message_id: int = 0, *, now: float) -> None:
        self._count(exchange, due, 1)
        self._place(due, next(self._order), message_id, exchange, routing_key, props_raw, body, now, len(WIDTHS) - 1)

    def add_recovered(self, exchange: str, exchange_len: int, rows: Sequence[DelayRow], *, now: float) -> None:
        """A batch of ``exchange``'s recovered persistent messages in log order
        (``persistence/store_delayed.LiveDelays``). Why not ``add`` each: a restart with millions
        held spent most of its time placing them one at a time. Here a row is looked at once: its
        bucket picked, its bucket record's head packed and put before the tail it came with (the
        two formats share it); then one append per bucket and one count per minute of due time.
        One due already, or within the horizon, goes to a level-0 bucket whose read time has come,
        not to the heap: the ticks take those back ``read_bytes`` at a time, oldest bucket first
        (``_step_buckets``), however many came due while the broker was down."""
        files = self._files
        if files is None:  # no data directory: everything is in the heap
            for due_ms, mid, lrk, lprops, tail in rows:
                r_at, p_at = exchange_len + lrk, exchange_len + lrk + lprops
                self.add(due_ms / 1000, exchange, tail[exchange_len:r_at].decode(), tail[r_at:p_at],
                         tail[p_at:], mid, now=now)
            return
        order, pack, widths = self._order, HEAD.pack, WIDTHS
        span0, span1, span2, span3 = SPANS[:4]
        groups: dict[tuple[int, int], list[bytes]] = {}
        minutes: list[int] = []
        for due_ms, mid, lrk, lprops, tail in rows:
            due = due_ms / 1000
            distance = due - now
            level = 0 if distance < span0 else 1 if distance < span1 else 2 if distance < span2 \
                else 3 if distance < span3 else 4
            width = widths[level]
            index = int(due // width)
            while level and (index - 1) * width <= now:  # that bucket's cascade time has come
                level -= 1
                width = widths[level]
                index = int(due // width)
            parts = groups.get((level, index))
            if parts is None:
                parts = groups[(level, index)] = []
            parts += (pack(due, next(order), mid, exchange_len, lrk, lprops,
                           len(tail) - exchange_len - lrk - lprops), tail)
            minutes.append(int(due // 60))
        for (level, index), parts in groups.items():
            bucket = self._bucket(level, index)
            n = len(parts) // 2
            bucket.count += n
            bucket.by_exchange[exchange] = bucket.by_exchange.get(exchange, 0) + n
            files.append(bucket.name, b"".join(parts))
        for minute, n in Counter(minutes).items():
            self._minutes[(exchange, minute)] = self._minutes.get((exchange, minute), 0) + n
        self._totals[exchange] = self._totals.get(exchange, 0) + len(rows)

    def _bucket(self, level: int, index: int) -> _Bucket:
        bucket = self._buckets.get((level, index))
        if bucket is None:
            bucket = self._buckets[(level, index)] = _Bucket(level, index)
            heapq.heappush(self._actions, (_action(level, index), level, index))
        return bucket

    def _count(self, exchange: str, due: float, n: int) -> None:
        key = (exchange, int(due // 60))
        left = self._minutes.get(key, 0) + n
        if left:
            self._minutes[key] = left
        else:
            self._minutes.pop(key, None)
        total = self._totals.get(exchange, 0) + n
        if total:
            self._totals[exchange] = total
        else:
            self._totals.pop(exchange, None)

    def _place(self, due: float, order: int, mid: int, exchange: str, routing_key: str, props_raw: bytes,
               body: bytes, now: float, top: int) -> None:
        """Into the heap, or the bucket of the lowest level (at most ``top``) that reaches ``due``,
        going lower while that bucket's read time has come already."""
        files = self._files
        level = 0
        if files is not None:
            distance = due - now
            while level < top and distance >= 16 * WIDTHS[level]:
                level += 1
            while level >= 0 and _action(level, int(due // WIDTHS[level])) <= now:
                level -= 1
        if files is None or level < 0:
            heapq.heappush(self._heap, DelayedMessage(due, order, exchange, routing_key, props_raw, body, mid))
            return
        bucket = self._bucket(level, int(due // WIDTHS[level]))
        bucket.count += 1
        bucket.by_exchange[exchange] = bucket.by_exchange.get(exchange, 0) + 1
        files.append(bucket.name, encode(due, order, mid, exchange, routing_key, props_raw, body))

    # ------------------------------------------------------------------ time
    def pop_due(self, now: float) -> list[DelayedMessage]:
        """The messages due at ``now``, in (due, publish) order, after the buckets whose time has
        come were read (``read_bytes`` of them at most: ``next_due`` is then ``now``)."""
        self._step_buckets(now)
        heap = self._heap
        out = []
        while heap and heap[0].due <= now:
            item = heapq.heappop(heap)
            self._count(item.exchange, item.due, -1)
            out.append(item)
        return out

    def _step_buckets(self, now: float) -> None:
        files, actions = self._files, self._actions
        if files is None:
            return
        budget = self._read_bytes  # a tick reads this much at most, even of level 0 (add_recovered)
        while budget > 0 and actions and actions[0][0] <= now:
            _, level, index = actions[0]
            bucket = self._buckets[(level, index)]
            data, done = files.read(bucket.name, bucket.offset, budget)
            budget -= len(data)
            taken = 0
            for stop, rec in decode(data):
                taken = stop
                self._take(bucket, rec, now, level - 1)
            bucket.offset += taken
            if done:
                heapq.heappop(actions)
                del self._buckets[(level, index)]
                files.remove(bucket.name)

    def _take(self, bucket: _Bucket, rec: DelayRecord, now: float, top: int) -> None:
        due, order, mid, exchange, routing_key, props_raw, body = rec
        bucket.count -= 1
        bucket.by_exchange[exchange] -= 1
        if top < 0:
            heapq.heappush(self._heap, DelayedMessage(due, order, exchange, routing_key, props_raw, body, mid))
        else:
            self._place(due, order, mid, exchange, routing_key, props_raw, body, now, top)

    def next_due(self) -> float | None:
        """The earliest of the heap's first due time and the next bucket read."""
        heap_due = self._heap[0].due if self._heap else None
        if not self._actions:
            return heap_due
        action = self._actions[0][0]
        return action if heap_due is None or action < heap_due else heap_due

    # ------------------------------------------------------------------ exchanges
    def drop_exchange(self, exchange: str) -> list[int]:
        """A delayed exchange went: its messages go, from the heap and every bucket holding some.
        Returns the store ids of the persistent ones (their Delay records need an Undelay)."""
        mids = [m.message_id for m in self._heap if m.exchange == exchange and m.message_id]
        if any(m.exchange == exchange for m in self._heap):
            self._heap = [m for m in self._heap if m.exchange != exchange]
            heapq.heapify(self._heap)
        files = self._files
        if files is not None:
            for bucket in self._buckets.values():
                if not bucket.by_exchange.get(exchange):
                    continue
                kept = bytearray()
                offset, done = bucket.offset, False
                while not done:
                    data, done = files.read(bucket.name, offset, CHUNK_BYTES)
                    taken = 0
                    for stop, rec in decode(data):
                        if rec[3] == exchange:
                            if rec[2]:
                                mids.append(rec[2])
                        else:
                            kept += data[taken:stop]
                        taken = stop
                    offset += taken
                    if not taken:
                        break
                files.replace(bucket.name, bytes(kept))
                bucket.offset = 0
                bucket.count -= bucket.by_exchange.pop(exchange)
        for key in [k for k in self._minutes if k[0] == exchange]:
            del self._minutes[key]
        self._totals.pop(exchange, None)
        return mids

    def close(self) -> None:
        """The vhost is gone: its bucket files go."""
        if self._files is not None:
            self._files.close()

    # ------------------------------------------------------------------ the operator's view
    def count(self, exchange: str) -> int:
        return self._totals.get(exchange, 0)

    def schedule(self, exchange: str, now: float) -> list[int]:
        """Messages of ``exchange`` per bin of ``HISTOGRAM_EDGES`` (one more for later), by the
        minute of their due time: a minute counts in the bin its start falls in (past: the first),
        so a message due within a bin's edge is never shown in a later bin."""
        bins = [0] * (len(HISTOGRAM_EDGES) + 1)
        for (name, minute), n in self._minutes.items():
            if name != exchange:
                continue
            left = minute * 60 - now
            i = 0
            while i < len(HISTOGRAM_EDGES) and left > HISTOGRAM_EDGES[i]:
                i += 1
            bins[i] += n
        return bins

    def in_memory(self) -> int:
        """Messages held in the heap (the rest are in bucket files)."""
        return len(self._heap)

    def __len__(self) -> int:
        return sum(self._totals.values())
