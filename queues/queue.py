"""The classic queue (and the quorum queue, the same logic under quorum rules): what comes in
and what comes back (enqueue, bounds, TTL, settling, returns, dead letters, spill and paging).
Handing ready entries out to consumers is its base ``HandOut`` (hand_out.py).

Rule 1: a ``Queue`` owns its sequence numbers, TTL and delayed returns; its ``Unacked``
(unacked.py) owns the entries out with consumers, its ``Backlog`` (backlog.py) the ready entries
(the resident window and the spilled range behind it), and what every queue type shares
(identity, the consumer list, last use) is its ``Destination`` part (destination.py); the stream
log is its sibling. Everything goes through its methods; each is synchronous and takes ``now``
from the caller, so a dispatch is atomic.
Rule 2 (nsq's ownership check, ``Unacked.release``): ack/requeue/reject act only on an entry
the queue still holds unacked, so a late ack after a requeue or a purge changes nothing.
Rule 3: it never calls up. A message that leaves for good is reported in the caller's ``left``
list (see ``outcome``); the only outward call is ``ConsumerSink.deliver`` during ``dispatch``.
Rule 4: what it holds in memory is also added to the broker's ``HeldTally`` (held.py) where it
changes: by its ``ReadyList`` for ready entries, its ``Unacked`` for a release, ``HandOut`` for
an entry taken and not kept unacked, ``Destination`` for consumers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from .args import Overflow, QueueArgs
from .backing import Backing, PropsInfo, RecoveredRow
from .backlog import Backlog
from .consumer import Consumer
from .destination import Destination
from .hand_out import HandOut
from .held import HeldTally
from .message import EntryRun, Message, QueueEntry
from .retry import RetryHold, retry_delay
from .unacked import Unacked
from .outcome import ACCEPTED, REJECTED, EnqueueOutcome, Left, QueueStats, left_entry

__all__ = ["ENTRY_OVERHEAD", "EnqueueOutcome", "Queue", "QueueStats"]

# RAM per message held in memory besides its body: the QueueEntry and Message objects, the
# property bytes and the key strings (measured with tracemalloc at about 260 B, rounded up).
ENTRY_OVERHEAD = 320


class Queue(HandOut):
    __slots__ = ("_seq", "_ttl", "_retry")

    def __init__(self, name: str, *, vhost: str = "/", durable: bool = False, exclusive_owner: object | None = None,
                 auto_delete: bool = False, arguments: Mapping[str, Any] | None = None, args: QueueArgs | None = None,
                 resident_max_messages: int = 50_000, resident_max_bytes: int = 64 << 20,
                 backing_factory: Callable[[], Backing] | None = None, held: HeldTally | None = None,
                 queue_type: str = "classic") -> None:
        Destination.__init__(self, name, queue_type, vhost=vhost, durable=durable, exclusive_owner=exclusive_owner,
                             auto_delete=auto_delete, arguments=arguments, args=args, held=held)
        self._backlog = Backlog(self.args.max_priority, self._held, backing_factory, resident_max_messages,
                                resident_max_bytes)
        self._unacked = Unacked(self._held)
        self._rr = 0
        self._seq = 0
        ttl = self.args.message_ttl_ms
        self._ttl = ttl / 1000 if ttl is not None else None
        self._retry: RetryHold | None = None  # returns waiting for their delayed retry (retry.py)

    # ------------------------------------------------------------------ counts
    @property
    def messages_ready(self) -> int:
        return self._backlog.count

    @property
    def messages_unacked(self) -> int:
        return len(self._unacked)

    @property
    def message_bytes_ready(self) -> int:
        return self._backlog.bytes

    @property
    def message_bytes_unacked(self) -> int:
        return self._unacked.bytes

    @property
    def memory(self) -> int:
        """Estimated RAM held for this queue's messages (spilled ones cost only their counters).
        A body routed to several queues is shared but counted in each: an upper bound."""
        ready = self._backlog.ready
        return (ready.count + len(self._unacked)) * ENTRY_OVERHEAD + ready.bytes + self._unacked.bytes

    @property
    def resident_count(self) -> int:
        return self._backlog.ready.count

    def spilled_count(self) -> int:
        return self._backlog.spill.count

    def spilled_bytes(self) -> int:
        """Body bytes of the ready messages kept on disk (RabbitMQ's ``message_bytes_paged_out``)."""
        return self._backlog.spill.bytes

    def head(self) -> QueueEntry | None:
        """The next resident entry to go out (None when empty or when only spilled ones are left)."""
        return self._backlog.ready.peek()

    # ------------------------------------------------------------------ publish
    def _new_entry(self, message: Message, now: float) -> QueueEntry:
        self._seq += 1
        expires_at = None
        ttl = self._ttl
        if message.expiration_ms is not None:
            self.timed = True
            per_message = message.expiration_ms / 1000
            ttl = per_message if ttl is None else min(ttl, per_message)
        if ttl is not None:
            expires_at = now + ttl
        return QueueEntry(self._seq, message, False, 0, expires_at)

    def enqueue(self, message: Message, now: float, left: list[Left] | None = None) -> EnqueueOutcome:
        """Append ``message``; the length bounds may drop heads (or this very message) into ``left``."""
        args = self.args
        if args.max_length is not None or args.max_length_bytes is not None:
            full = args.exceeded_by(self.messages_ready + 1, self.message_bytes_ready + len(message.body))
            if full and args.overflow is not Overflow.DROP_HEAD:
                self.stats.dropped += 1
                if args.overflow is Overflow.REJECT_PUBLISH_DLX:
                    self._gone(left, self._new_entry(message, now), "maxlen", held=False)
                return REJECTED
        self.stats.published += 1
        entry = self._new_entry(message, now)
        self._backlog.push(entry)
        if args.max_length is not None or args.max_length_bytes is not None:
            self._drop_over_limit(left)
        return ACCEPTED

    def takes_runs(self) -> bool:
        """No length bound: a run of publishes can neither be refused nor drop a head."""
        return self.args.max_length is None and self.args.max_length_bytes is None

    def enqueue_run(self, messages: Sequence[Message], size: int, now: float, expiring: bool = True,
                    make_entries: EntryRun | None = None) -> None:
        """``enqueue`` of each message in order (``size``: their body bytes), for a queue that
        ``takes_runs``; with no TTL at all the entries are made straight, no call per message
        (``make_entries``: the caller's maker of a run's entries, C's where it was built)."""
        count = len(messages)
        self.stats.published += count
        if not expiring and self._ttl is None:
            seq = self._seq
            self._seq = seq + count
            if make_entries is not None:
                self._backlog.push_run(make_entries(seq + 1, messages), size)
            else:
                self._backlog.push_run(list(map(QueueEntry, range(seq + 1, seq + count + 1), messages)), size)
            return
        new_entry = self._new_entry
        self._backlog.push_run([new_entry(message, now) for message in messages], size)

    def _drop_over_limit(self, left: list[Left] | None) -> None:
        while self.args.exceeded_by(self.messages_ready, self.message_bytes_ready):
            head = self._backlog.pop_any()
            if head is None:
                break
            self.stats.dropped += 1
            self._gone(left, head, "maxlen")

    def apply_args(self, args: QueueArgs, left: list[Left] | None = None) -> None:
        """New effective arguments (a policy changed): limits apply at once, as RabbitMQ's
        drop-head trims the queue to a lower max-length into ``left`` (the reject modes refuse the
        next publish); a new TTL applies to messages enqueued from now on. ``x-max-priority`` and
        the spill backing cannot change."""
        Destination.apply_args(self, args)
        self._ttl = args.message_ttl_ms / 1000 if args.message_ttl_ms is not None else None
        if args.overflow is Overflow.DROP_HEAD:
            self._drop_over_limit(left)

    def add_recovered(self, message: Message, *, redelivered: bool = False, delivery_count: int = 0) -> QueueEntry:
        """Rebuild from the store at start, in original order."""
        entry = self._new_entry(message, message.timestamp)
        entry.redelivered = redelivered
        entry.delivery_count = delivery_count
        self._backlog.push(entry)
        return entry

    def spills_next(self) -> bool:
        """The next entry added would go to the spill (the resident window is full, or entries
        are spilled already): recovery then spills the rest with ``add_recovered_spilled``."""
        return self._backlog.spills_next()

    def add_recovered_spilled(self, rows: Iterable[RecoveredRow], props_info: PropsInfo) -> int:
        """Rebuild the spilled part from the store at start, in original order, without a message
        object per entry (``Backing.append_recovered``); call only once ``spills_next``."""
        self.timed = True  # a recovered row may carry an expiration (not looked at here)
        count = self._backlog.append_recovered(self._seq + 1, rows, props_info, self._ttl)
        self._seq += count
        return count

    # ------------------------------------------------------------------ settle
    def ack(self, entry: QueueEntry, left: list[Left] | None = None) -> None:
        if self._unacked.release(entry):
            self.stats.acked += 1
            self._gone(left, entry, None)

    def ack_run(self, entries: list[QueueEntry], left: list[Left] | None = None) -> None:
        released = self._unacked.release_run(entries)
        self.stats.acked += len(released)
        if left is not None:
            left.extend([left_entry(entry, None) for entry in released])

    def requeue(self, entry: QueueEntry, left: list[Left] | None = None) -> None:
        if not self._unacked.release(entry):
            return
        entry.redelivered = True
        entry.delivery_count += 1
        limit = self.args.delivery_limit
        if limit is not None and entry.delivery_count > limit:
            self._gone(left, entry, "delivery_limit")
            return
        self._backlog.requeue(entry)

    def give_back(self, entry: QueueEntry, left: list[Left] | None, failed: bool, now: float) -> None:
        """A return under RabbitMQ 4.3's rules: every return counts as acquired, only a ``failed``
        one (reject, a lost channel) toward the delivery limit; it may wait for a delayed retry."""
        if not self._unacked.release(entry):
            return
        entry.redelivered = True
        entry.acquired_count = max(entry.acquired_count, entry.delivery_count) + 1
        if failed:
            entry.delivery_count += 1
            limit = self.args.delivery_limit
            if limit is not None and entry.delivery_count > limit:
                self._gone(left, entry, "delivery_limit")
                return
        delay = retry_delay(self.args, entry, failed) if self.args.delayed_retry != "disabled" else 0.0
        if delay > 0:
            if self._retry is None:
                self._retry = RetryHold()
            self._retry.hold(entry, now + delay)
            return
        self._backlog.requeue(entry)

    def release_delayed(self, now: float) -> bool:
        """Returns whose delayed retry is due are ready again, in their place."""
        retry = self._retry
        if retry is None or not len(retry):
            return False
        due = retry.release_due(now)
        for entry in due:
            self._backlog.requeue(entry)
        return bool(due)

    def reject(self, entry: QueueEntry, left: list[Left] | None = None) -> None:
        if self._unacked.release(entry):
            self._gone(left, entry, "rejected")

    # ------------------------------------------------------------------ upkeep
    def purge(self, left: list[Left] | None = None) -> int:
        """Drop every ready message (``Backlog.purge``: the spill unread unless ``left`` asks for
        each one), and those waiting for a delayed retry; the broker records a purge as one store
        record sparing the unacked ids."""
        count = self._backlog.count
        self._backlog.purge(left)
        if self._retry is not None and len(self._retry):
            waiting = self._retry.clear()
            count += len(waiting)
            if left is not None:
                left.extend(left_entry(entry, None) for entry in waiting)
        return count

    def unacked_message_ids(self) -> list[int]:
        return self._unacked.message_ids()

    def expire(self, now: float, left: list[Left] | None = None) -> int:
        """Drop expired entries at the head (RabbitMQ expires from the head only)."""
        expired = 0
        while (head := self._backlog.expired_head(now)) is not None:
            expired += 1
            self.stats.expired += 1
            self._gone(left, head, "expired")
        return expired

    def next_deadline(self) -> float | None:
        when = self._backlog.next_deadline()
        if self._retry is not None and (due := self._retry.next_due()) is not None:
            return due if when is None or due < when else when
        return when

    def delete(self) -> list[Consumer[Any]]:
        """Everything goes (the broker records the store side as one DropQueue)."""
        consumers = Destination.delete(self)
        self._backlog.close()
        if self._retry is not None:
            self._retry.clear()
        self._unacked.drop_all()
        return consumers

    # ------------------------------------------------------------------ paging (the pager's calls)
    @property
    def generation(self) -> int:
        return self._backlog.generation

    def page_in_wanted(self) -> bool:
        return self._backlog.page_in_wanted()

    def page_in_room(self) -> tuple[int, int]:
        return self._backlog.page_in_room()

    def take_backing(self) -> Backing | None:
        return self._backlog.spill.backing

    def spill_lost(self, count: int, body_bytes: int) -> None:
        """The backing skipped ``count`` spilled entries it could not read back (damaged)."""
        self._backlog.spill.lost(count, body_bytes)
        self.stats.spill_damaged += count

    def page_in(self, entries: list[QueueEntry], generation: int, left: list[Left] | None = None) -> None:
        """Entries the pager read back; if a purge came first they still owe their store acks."""
        if self.deleted:
            return  # the store drops the whole queue
        if not self._backlog.page_in(entries, generation) and left is not None:
            left.extend(left_entry(entry, None) for entry in entries)
