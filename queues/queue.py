"""One queue: ready list, in-flight entries, consumers, bounds, TTL, dead letters and spill.

Rule 1: a ``Queue`` owns its ready entries (``ReadyList`` plus the spilled range), its unacked
entries and its consumers' credit. Everything goes through its methods; each is synchronous and
takes ``now`` from the caller, so a dispatch is atomic.
Rule 2 (nsq's ownership check): ack/requeue/reject act only on an entry the queue still holds
unacked, so a late ack after a requeue, or after the queue was purged, changes nothing.

Spill: once the resident window (N messages / M bytes) is full, new entries go to the ``Backing``
and keep going there until the pager has brought every spilled entry back, so FIFO order holds.
Requeued entries always stay resident. Priority queues do not spill.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from .args import Overflow, QueueArgs
from .backing import Backing
from .consumer import Consumer
from .dead_letter import DeadLetter
from .message import Message, QueueEntry
from .ready import ReadyList

__all__ = ["ENTRY_OVERHEAD", "EnqueueOutcome", "Queue", "QueueStats"]

# RAM per message held in memory besides its body: the QueueEntry and Message objects, the
# property bytes and the key strings (measured with tracemalloc at about 260 B, rounded up).
ENTRY_OVERHEAD = 320


class EnqueueOutcome(Enum):
    ACCEPTED = "accepted"
    REJECTED = "rejected"  # overflow reject-publish: the publisher gets a nack


@dataclass(slots=True)
class QueueStats:
    published: int = 0
    delivered: int = 0
    acked: int = 0
    redelivered: int = 0
    expired: int = 0
    dropped: int = 0  # drop-head, reject-publish
    dead_lettered: int = 0
    spill_damaged: int = 0  # spilled entries lost to a damaged spill record


class Queue:
    def __init__(self, name: str, *, vhost: str = "/", durable: bool = False, exclusive_owner: object | None = None,
                 auto_delete: bool = False, arguments: Mapping[str, Any] | None = None, args: QueueArgs | None = None,
                 resident_max_messages: int = 50_000, resident_max_bytes: int = 64 << 20,
                 backing_factory: Callable[[], Backing] | None = None) -> None:
        self.name = name
        self.vhost = vhost
        self.durable = durable
        self.exclusive_owner = exclusive_owner
        self.auto_delete = auto_delete
        self.arguments: dict[str, Any] = dict(arguments or {})
        self.args = args if args is not None else QueueArgs.parse(self.arguments, name)
        self.resident_max_messages = resident_max_messages
        self.resident_max_bytes = resident_max_bytes
        self._backing_factory = None if self.args.max_priority else backing_factory
        self._backing: Backing | None = None
        self._spilled = 0  # entries appended to the backing and not yet paged back in
        self._spilled_bytes = 0
        self._ready = ReadyList(self.args.max_priority)
        self._unacked: dict[int, QueueEntry] = {}
        self._unacked_bytes = 0  # bodies of the entries in _unacked
        self._consumers: list[Consumer] = []
        self._rr = 0
        self._seq = 0
        self._dead: list[DeadLetter] = []
        self._last_used = 0.0
        self.generation = 0
        self.stats = QueueStats()
        self.on_discard: Callable[[Queue, QueueEntry], None] | None = None
        self.deleted = False
        ttl = self.args.message_ttl_ms
        self._ttl = ttl / 1000 if ttl is not None else None

    # ------------------------------------------------------------------ counts
    @property
    def messages_ready(self) -> int:
        return self._ready.count + self._spilled

    @property
    def messages_unacked(self) -> int:
        return len(self._unacked)

    @property
    def message_bytes_ready(self) -> int:
        return self._ready.bytes + self._spilled_bytes

    @property
    def message_bytes_unacked(self) -> int:
        return self._unacked_bytes

    @property
    def memory(self) -> int:
        """Estimated RAM held for this queue's messages (spilled ones cost only their counters).
        A body routed to several queues is shared but counted in each: an upper bound."""
        resident = self._ready.count + len(self._unacked)
        return resident * ENTRY_OVERHEAD + self._ready.bytes + self._unacked_bytes

    @property
    def resident_count(self) -> int:
        return self._ready.count

    @property
    def consumer_count(self) -> int:
        return len(self._consumers)

    @property
    def has_exclusive_consumer(self) -> bool:
        return any(c.exclusive for c in self._consumers)

    def consumers(self) -> list[Consumer]:
        return list(self._consumers)

    # ------------------------------------------------------------------ publish
    def _new_entry(self, message: Message, now: float) -> QueueEntry:
        self._seq += 1
        expires_at = None
        ttl = self._ttl
        if message.expiration_ms is not None:
            per_message = message.expiration_ms / 1000
            ttl = per_message if ttl is None else min(ttl, per_message)
        if ttl is not None:
            expires_at = now + ttl
        return QueueEntry(self._seq, message, False, 0, expires_at)

    def enqueue(self, message: Message, now: float) -> EnqueueOutcome:
        args = self.args
        if args.max_length is not None or args.max_length_bytes is not None:
            if args.overflow is not Overflow.DROP_HEAD and self._would_overflow(len(message.body)):
                self.stats.dropped += 1
                if args.overflow is Overflow.REJECT_PUBLISH_DLX:
                    self._dead_letter(message, "maxlen", 0)
                return EnqueueOutcome.REJECTED
        self.stats.published += 1
        entry = self._new_entry(message, now)
        self._push(entry)
        if args.max_length is not None or args.max_length_bytes is not None:
            while self._over_limit():
                head = self._pop_any()
                if head is None:
                    break
                self.stats.dropped += 1
                self._dead_letter(head.message, "maxlen", head.delivery_count)
                self._discard(head)
        return EnqueueOutcome.ACCEPTED

    def _would_overflow(self, size: int) -> bool:
        args = self.args
        if args.max_length is not None and self.messages_ready + 1 > args.max_length:
            return True
        return args.max_length_bytes is not None and self.message_bytes_ready + size > args.max_length_bytes

    def _over_limit(self) -> bool:
        args = self.args
        if args.max_length is not None and self.messages_ready > args.max_length:
            return True
        return args.max_length_bytes is not None and self.message_bytes_ready > args.max_length_bytes

    def _push(self, entry: QueueEntry) -> None:
        ready = self._ready
        if self._backing_factory is not None and (
            self._spilled or ready.count >= self.resident_max_messages or ready.bytes >= self.resident_max_bytes
        ):
            try:
                backing = self._backing
                if backing is None:
                    backing = self._backing = self._backing_factory()
                backing.append((entry,))
            except OSError:
                if self._spilled:
                    raise
                ready.append(entry)  # no room on disk for a first spill file: it stays in memory
                return
            self._spilled += 1
            self._spilled_bytes += len(entry.message.body)
            return
        ready.append(entry)

    def add_recovered(self, message: Message, *, redelivered: bool = False, delivery_count: int = 0) -> QueueEntry:
        """Rebuild from the store at start, in original order."""
        entry = self._new_entry(message, message.timestamp)
        entry.redelivered = redelivered
        entry.delivery_count = delivery_count
        self._push(entry)
        return entry

    # ------------------------------------------------------------------ taking entries
    def _pop_any(self) -> QueueEntry | None:
        entry = self._ready.pop()
        if entry is None and self._spilled and self._backing is not None:
            batch = self._backing.read_batch(1, 1 << 30)  # rare: bound enforcement on a spilled head
            if batch:
                self._spilled -= 1
                self._spilled_bytes -= len(batch[0].message.body)
                entry = batch[0]
        return entry

    def _pop_live(self, now: float) -> QueueEntry | None:
        """Next ready entry that has not expired; expired ones are dead-lettered on the way."""
        ready = self._ready
        while True:
            entry = ready.pop()
            if entry is None:
                return None
            if self._spilled and self.page_in_wanted():
                self._backing.want_page_in()  # type: ignore[union-attr]  # (checked there)
            if entry.expires_at is not None and entry.expires_at < now:
                self.stats.expired += 1
                self._dead_letter(entry.message, "expired", entry.delivery_count)
                self._discard(entry)
                continue
            return entry

    def dispatch(self, now: float) -> int:
        consumers = self._consumers
        if not consumers or not self._ready:
            return 0
        if self.args.single_active_consumer:
            consumers = consumers[:1]
        elif len({c.priority for c in consumers}) > 1:
            return self._dispatch_by_priority(now)
        n = len(consumers)
        idx = self._rr % n
        idle = 0
        delivered = 0
        while idle < n:
            consumer = consumers[idx]
            if not consumer.can_take():
                idle += 1
                idx = idx + 1 if idx + 1 < n else 0
                continue
            entry = self._pop_live(now)
            if entry is None:
                break  # this consumer is first in line next time
            idx = idx + 1 if idx + 1 < n else 0
            idle = 0
            delivered += 1
            # one path for every delivery, so the unacked byte count always matches _release
            self._hand_over(consumer, entry)
        self._rr = idx
        return delivered

    def _dispatch_by_priority(self, now: float) -> int:
        """Consumer priorities: the highest-priority consumers with credit get messages first."""
        delivered = 0
        ordered = sorted(self._consumers, key=lambda c: -c.priority)
        while self._ready:
            consumer = next((c for c in ordered if c.can_take()), None)
            if consumer is None:
                break
            entry = self._pop_live(now)
            if entry is None:
                break
            delivered += 1
            self._hand_over(consumer, entry)
            ordered.remove(consumer)  # round-robin within equal priority
            ordered.append(consumer)
            ordered.sort(key=lambda c: -c.priority)
        return delivered

    def _hand_over(self, consumer: Consumer, entry: QueueEntry) -> None:
        entry.owner = consumer
        self.stats.delivered += 1
        if entry.redelivered:
            self.stats.redelivered += 1
        if consumer.no_ack:
            consumer.sink.deliver(consumer, self, entry)
            self._discard(entry)
        else:
            self._unacked[entry.seq] = entry
            self._unacked_bytes += len(entry.message.body)
            consumer.unacked += 1
            consumer.sink.deliver(consumer, self, entry)

    def get(self, now: float, *, no_ack: bool, owner: object) -> QueueEntry | None:
        self._last_used = now
        entry = self._pop_live(now)
        if entry is None:
            return None
        entry.owner = owner
        self.stats.delivered += 1
        if entry.redelivered:
            self.stats.redelivered += 1
        if no_ack:
            self._discard(entry)
        else:
            self._unacked[entry.seq] = entry
            self._unacked_bytes += len(entry.message.body)
        return entry

    # ------------------------------------------------------------------ settle
    def _release(self, entry: QueueEntry) -> bool:
        if self._unacked.get(entry.seq) is not entry:
            return False
        del self._unacked[entry.seq]
        self._unacked_bytes -= len(entry.message.body)
        owner = entry.owner
        if isinstance(owner, Consumer):
            owner.unacked -= 1
        entry.owner = None
        return True

    def ack(self, entry: QueueEntry) -> None:
        if self._release(entry):
            self.stats.acked += 1
            self._discard(entry)

    def requeue(self, entry: QueueEntry) -> None:
        if not self._release(entry):
            return
        entry.redelivered = True
        entry.delivery_count += 1
        limit = self.args.delivery_limit
        if limit is not None and entry.delivery_count > limit:
            self._dead_letter(entry.message, "delivery_limit", entry.delivery_count)
            self._discard(entry)
            return
        self._ready.requeue(entry)

    def requeue_many(self, entries: Iterable[QueueEntry]) -> None:
        for entry in entries:
            self.requeue(entry)

    def reject(self, entry: QueueEntry) -> None:
        if self._release(entry):
            self._dead_letter(entry.message, "rejected", entry.delivery_count)
            self._discard(entry)

    def _discard(self, entry: QueueEntry) -> None:
        hook = self.on_discard
        if hook is not None:
            hook(self, entry)

    def _dead_letter(self, message: Message, reason: str, delivery_count: int) -> None:
        if self.args.dead_letter_exchange is not None:
            self.stats.dead_lettered += 1
            self._dead.append(DeadLetter(message, reason, self.name, delivery_count))

    def dead_letter_pending(self, message: Message) -> bool:
        """True while ``message`` waits in the dead-letter outbox (it was the last one added), so
        the store can hold its Ack until the DLX copy is recorded."""
        return bool(self._dead) and self._dead[-1].message is message

    def take_dead_letters(self) -> list[DeadLetter]:
        if not self._dead:
            return []
        dead, self._dead = self._dead, []
        return dead

    # ------------------------------------------------------------------ consumers
    def add_consumer(self, consumer: Consumer) -> None:
        self._consumers.append(consumer)

    def remove_consumer(self, tag: str) -> Consumer | None:
        for i, consumer in enumerate(self._consumers):
            if consumer.tag == tag:
                del self._consumers[i]
                return consumer
        return None

    # ------------------------------------------------------------------ maintenance
    def purge(self, *, each: bool = True) -> int:
        """Drop every ready message. ``each=False``: the caller records the purge as one store
        record that spares the unacked ids (``unacked_message_ids``), so entries are not passed to
        ``on_discard`` one by one and the spill backing is dropped unread (reading it back was
        seconds of blocked event loop for a large spilled queue)."""
        count = self.messages_ready
        ready = self._ready.clear()
        if each:
            for entry in ready:
                self._discard(entry)
        if self._backing is not None:
            while each:  # spilled entries still owe their store acks
                batch = self._backing.read_batch(4096, 64 << 20)
                if not batch:
                    break
                for entry in batch:
                    self._discard(entry)
            self._backing.drop()
        self._spilled = 0
        self._spilled_bytes = 0
        self.generation += 1
        return count

    def unacked_message_ids(self) -> list[int]:
        """Ids of the messages delivered from this queue and not yet settled."""
        return [entry.message.id for entry in self._unacked.values()]

    def expire(self, now: float) -> int:
        """Drop expired entries at the head (RabbitMQ expires from the head only)."""
        ready = self._ready
        expired = 0
        while True:
            head = ready.peek()
            if head is None or head.expires_at is None or head.expires_at >= now:
                return expired
            ready.pop()
            expired += 1
            self.stats.expired += 1
            self._dead_letter(head.message, "expired", head.delivery_count)
            self._discard(head)

    def next_deadline(self) -> float | None:
        head = self._ready.peek()
        return head.expires_at if head is not None else None

    def touch(self, now: float) -> None:
        self._last_used = now

    def idle_expired(self, now: float) -> bool:
        expires = self.args.expires_ms
        return expires is not None and not self._consumers and now - self._last_used > expires / 1000

    def delete(self) -> list[Consumer]:
        """Everything goes (the broker records the store side as one DropQueue)."""
        consumers, self._consumers = self._consumers, []
        self._ready.clear()
        self._unacked.clear()
        self._unacked_bytes = 0
        if self._backing is not None:
            self._backing.drop()
            self._backing.close()
            self._backing = None
        self._spilled = 0
        self._spilled_bytes = 0
        self.generation += 1
        self.deleted = True
        return consumers

    # ------------------------------------------------------------------ spill
    def spilled_count(self) -> int:
        return self._spilled

    def page_in_wanted(self) -> bool:
        # both bounds: a queue of large bodies reaches the byte bound long before the count one
        return bool(self._spilled) and self._backing is not None and \
            self._ready.count < self.resident_max_messages // 2 and \
            self._ready.bytes < self.resident_max_bytes // 2

    def page_in_room(self) -> tuple[int, int]:
        """How many entries and body bytes one page-in may bring back without passing the bounds."""
        return (max(self.resident_max_messages - self._ready.count, 1),
                max(self.resident_max_bytes - self._ready.bytes, 1))

    def spill_lost(self, count: int, body_bytes: int) -> None:
        """The backing skipped ``count`` spilled entries it could not read back (damaged)."""
        self._spilled = max(self._spilled - count, 0)
        self._spilled_bytes = max(self._spilled_bytes - body_bytes, 0) if self._spilled else 0
        self.stats.spill_damaged += count

    def take_backing(self) -> Backing | None:
        return self._backing

    def page_in(self, entries: list[QueueEntry], generation: int) -> None:
        if self.deleted:
            return  # the store drops the whole queue
        if generation != self.generation:
            for entry in entries:  # purged while this batch was being read: they still owe store acks
                self._discard(entry)
            return
        self._spilled -= len(entries)
        self._spilled_bytes -= sum(len(e.message.body) for e in entries)
        self._ready.extend(entries)
