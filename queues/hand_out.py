"""The classic queue's consuming side: ready entries handed to consumers and to basic.get.

Why apart from queue.py: handing out is the per-delivery hot path (credit, round-robin, consumer
priorities, single active consumer, TTL checked on the way out) and changes for reasons of its
own; queue.py keeps what comes in and what comes back (enqueue, bounds, settling, returns,
upkeep, paging). ``Queue`` (queue.py) is the only subclass.

Rule 1: ``HandOut`` owns the round-robin position; the ready entries are its ``Backlog``'s
(backlog.py) and the handed-out ones its ``Unacked``'s (unacked.py); ``Queue`` makes all three.
Rule 2: the only outward call is ``ConsumerSink.deliver``, the consumer's own buffer, which must
not call back into the queue; a message that leaves for good goes to the caller's ``left``.
Rule 3: an entry taken from the ready list stays in the ``HeldTally`` when it is kept unacked
(its two updates would cancel); one let go (no-ack, expired) leaves it here (``_let_go``).
"""

from __future__ import annotations

from operator import attrgetter
from typing import Any

from .backlog import Backlog
from .consumer import Consumer
from .destination import Destination
from .message import QueueEntry
from .outcome import Left, left_entry
from .unacked import Unacked

__all__ = ["HandOut"]

_redelivered = attrgetter("redelivered")
_UNCOUNTED = 1 << 62  # the credit of a consumer or sink with no count bound


class HandOut(Destination):
    __slots__ = ("_backlog", "_unacked", "_rr")
    _backlog: Backlog
    _unacked: Unacked
    _rr: int  # the consumer first in line next time

    def _pop_live(self, now: float, left: list[Left] | None) -> QueueEntry | None:
        """Next ready entry that has not expired, still counted as held (``ReadyList.take``): the
        caller keeps it unacked or lets it go (``_let_go``). Expired ones go to ``left`` on the way."""
        take = self._backlog.take
        while True:
            entry = take()
            if entry is None:
                return None
            if entry.expires_at is not None and entry.expires_at < now:
                self._let_go(entry)
                self.stats.expired += 1
                self._gone(left, entry, "expired")
                continue
            return entry

    def _let_go(self, entry: QueueEntry) -> None:
        """An entry taken from the ready list and not kept unacked is no longer held."""
        held = self._held
        held.entries -= 1
        held.bytes -= len(entry.message.body)

    def dispatch(self, now: float, left: list[Left] | None = None, delivered: list[QueueEntry] | None = None,
                 budget: Any = None) -> int:
        """Hand ready entries to consumers with credit, round-robin; returns how many. Entries now
        unacked are appended to ``delivered`` when given; no-ack ones and expired ones to ``left``.
        A classic queue's consumers take from memory: no read budget applies."""
        consumers = self._consumers
        if not consumers or not self._backlog.ready:
            return 0
        if self.args.single_active_consumer:
            consumers = consumers[:1]
        elif self._mixed_priorities:
            return self._dispatch_by_priority(now, left, delivered)
        if not self.timed:  # nothing can expire on the way out: whole turns at once
            count = self._dispatch_turns(consumers, now, delivered)
            if count >= 0:
                return count
        n = len(consumers)
        idx = self._rr % n
        idle = 0
        count = 0
        while idle < n:
            consumer = consumers[idx]
            if not consumer.can_take():
                idle += 1
                idx = idx + 1 if idx + 1 < n else 0
                continue
            entry = self._pop_live(now, left)
            if entry is None:
                break  # this consumer is first in line next time
            idx = idx + 1 if idx + 1 < n else 0
            idle = 0
            count += 1
            # one path for every delivery, so the unacked byte count always matches _release
            self._hand_over(consumer, entry, left, delivered, now)
        self._rr = idx
        return count

    def _dispatch_turns(self, consumers: list[Consumer[Any]], now: float,
                        delivered: list[QueueEntry] | None) -> int:
        """``dispatch``'s round-robin planned on counts, then each consumer's share handed over in
        one ``deliver_run``: the same entries to the same consumers in the same order as one by
        one, for a call per consumer instead of several per delivery. Only for consumers whose
        credit is a count (``RunSink.credit``, a prefetch window); -1 when one's is not (no-ack,
        no prefetch: its sink's byte bound is checked delivery by delivery)."""
        n = len(consumers)
        credit = [0] * n
        slot = [0] * n
        rooms: list[int] = []
        sinks: dict[int, int] = {}
        for i, consumer in enumerate(consumers):
            if not consumer.runs or consumer.no_ack:
                return -1
            sink = consumer.sink
            at = sinks.get(id(sink))
            if at is None:
                at = sinks[id(sink)] = len(rooms)
                rooms.append(sink.credit())  # type: ignore[attr-defined]  # ``runs`` says it has one
            slot[i] = at
            if consumer.prefetch:
                credit[i] = max(consumer.prefetch - consumer.unacked, 0)
            elif rooms[at] >= 0:
                credit[i] = _UNCOUNTED
            else:
                return -1
        for at, room in enumerate(rooms):
            if room < 0:
                rooms[at] = _UNCOUNTED
        ready = self._backlog.ready.count
        order: list[int] = []
        idx = self._rr % n
        idle = 0
        while idle < n:
            if credit[idx] and rooms[slot[idx]]:
                if len(order) == ready:
                    break  # this consumer is first in line next time
                credit[idx] -= 1
                rooms[slot[idx]] -= 1
                order.append(idx)
                idle = 0
            else:
                idle += 1
            idx = idx + 1 if idx + 1 < n else 0
        self._rr = idx
        if not order:
            return 0
        entries = self._backlog.take_run(len(order))
        if n == 1:
            self._hand_over_run(consumers[0], entries, now, delivered)
            return len(entries)
        runs: list[list[QueueEntry]] = [[] for _ in range(n)]
        for i, entry in zip(order, entries):
            runs[i].append(entry)
        for i, run in enumerate(runs):
            if run:
                self._hand_over_run(consumers[i], run, now, delivered)
        return len(entries)

    def _hand_over_run(self, consumer: Consumer[Any], entries: list[QueueEntry], now: float,
                       delivered: list[QueueEntry] | None) -> None:
        """``_hand_over`` of a consumer's turn (an ack-mode consumer's: all kept unacked)."""
        stats = self.stats
        stats.delivered += len(entries)
        redelivered = sum(map(_redelivered, entries))
        if redelivered:
            stats.redelivered += redelivered
        self._unacked.keep_run(consumer, entries)  # held before, held still: no tally update
        consumer.sink.deliver_run(consumer, self, entries, now)  # type: ignore[attr-defined]
        if delivered is not None:
            delivered.extend(entries)

    def _dispatch_by_priority(self, now: float, left: list[Left] | None,
                              delivered: list[QueueEntry] | None) -> int:
        """Consumer priorities: the highest-priority consumers with credit get messages first."""
        count = 0
        ordered = sorted(self._consumers, key=lambda c: -c.priority)
        while self._backlog.ready:
            consumer = next((c for c in ordered if c.can_take()), None)
            if consumer is None:
                break
            entry = self._pop_live(now, left)
            if entry is None:
                break
            count += 1
            self._hand_over(consumer, entry, left, delivered, now)
            ordered.remove(consumer)  # round-robin within equal priority
            ordered.append(consumer)
            ordered.sort(key=lambda c: -c.priority)
        return count

    def _hand_over(self, consumer: Consumer[Any], entry: QueueEntry, left: list[Left] | None,
                   delivered: list[QueueEntry] | None, now: float) -> None:
        self.stats.delivered += 1
        if entry.redelivered:
            self.stats.redelivered += 1
        if consumer.no_ack:
            entry.owner = consumer
            self._let_go(entry)
            self.stats.delivered_no_ack += 1
            consumer.sink.deliver(consumer, self, entry, now)
            if left is not None:
                left.append(left_entry(entry, None))
        else:
            self._unacked.keep(entry, consumer)  # held before, held still: no tally update
            consumer.sink.deliver(consumer, self, entry, now)
            if delivered is not None:
                delivered.append(entry)

    def get(self, now: float, *, no_ack: bool, owner: object, left: list[Left] | None = None) -> QueueEntry | None:
        """basic.get: the next live entry, unacked under ``owner`` unless ``no_ack`` (then in ``left``)."""
        self._last_used = now
        entry = self._pop_live(now, left)
        backlog = self._backlog
        while entry is None and backlog.spill.count:  # never get-empty while entries are spilled
            read, lost = backlog.read_head()
            self.stats.spill_damaged += lost
            if not read:
                break
            entry = self._pop_live(now, left)
        stats = self.stats
        if entry is None:
            stats.get_empty += 1
            return None
        stats.delivered += 1
        if entry.redelivered:
            stats.redelivered += 1
        if no_ack:
            entry.owner = owner
            self._let_go(entry)
            stats.got_no_ack += 1
            self._gone(left, entry, None)
        else:
            stats.got += 1
            self._unacked.keep(entry, owner)  # still held (``_pop_live``)
        return entry

    def _gone(self, left: list[Left] | None, entry: QueueEntry, reason: str | None, held: bool = True) -> None:
        """``entry`` left for good; a dead one counts as dead-lettered when there is somewhere to go."""
        if reason is not None and self.args.dead_letter_exchange is not None:
            self.stats.dead_lettered += 1
        if left is not None:
            left.append(left_entry(entry, reason, held))
