"""A stream queue (``x-queue-type: stream``): an append-only log consumed by offset.

Rule 1: the messages live only in the stream's log (``persistence.stream_log``): ``enqueue`` keeps
nothing (the delivery owner appends one ``StreamAppend`` per routed message to the store outbox,
and the flusher reports the new committed end through ``Delivery.stream_appended``). Consumption
never removes anything; retention drops whole old segments.
Rule 2: this object owns its readers (one ``StreamCursor`` per consumer, reading the segment files
with the consumer's credit as the bound, so a slow consumer holds back only itself) and the tracked
offsets of named consumers; like any queue it is driven only by the delivery owner, through the
``Destination`` protocol it shares with the classic queue (``queues/destination.py``): it is that
queue's sibling, holding none of its ready list or spill. A reader whose next bytes only the log's
tier holds waits for a read the shell makes off the event loop (``reads_wanted``). What a
consumer's arguments ask is read by ``stream_consumer_args``.
Rule 3: single active consumer (consumer arguments ``x-single-active-consumer: true`` and
``x-stream-consumer-name: G``) is this object's too: it keeps group G's members in the order they
came (``groups``) and only the active one reads. On a stream alone the first member is active; a
member of a super stream's group (``x-super-stream: NAME`` on a stream ``NAME-<i>``) is active on
partition ``i`` when it is member ``i mod members``, RabbitMQ's rule, so the partitions spread
evenly and move when a member joins or leaves. A member that becomes active reads on right after
the group's last acked offset, so nothing the group acked comes again. It waits for the member it
replaces to settle what it holds (RabbitMQ's step-down, where the old member answers before the new
one is activated), for ``handover_timeout`` at most: then that member's deliveries are let go
(their late acks return its credit but no longer move the group's offset) and come again to the
new member, as after a crash.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from headrace.persistence.stream_log import StreamBatch, StreamCursor, offset_at_time, stream_stats
from headrace.queues import (LOGGED, Consumer, Destination, EnqueueOutcome, GroupPosition, Left, Message, QueueArgs,
                             QueueEntry)
from headrace.queues.held import HeldTally
from headrace.server.amqp.errors import ChannelException
from headrace.server.amqp.properties import with_int_header
from headrace.server.amqp.spec import ReplyCode

from . import errors
from .stream_consumer_args import consumer_name, partition_index, single_active, start_offset
from .stream_filtering import consumer_filter, filter_value

__all__ = ["ReadBudget", "StreamQueue", "StreamReader"]

OFFSET_HEADER = b"x-stream-offset"
# what stream consumers read and are delivered per turn of the event loop, over all streams: a
# prefetch window of small messages, a few milliseconds of the loop
WAKE_RECORDS = 256
WAKE_BYTES = 64 << 10
NAME_CACHE = 256  # distinct (routing key, source) byte strings remembered per stream


@dataclass(slots=True, eq=False)
class StreamReader:
    consumer: Consumer[Any]
    cursor: StreamCursor
    name: str | None  # tracked offsets are kept under this name
    group: str | None = None  # single active consumer: the group (its name) this reader is a member of
    index: int = 0  # the stream's partition index in its super stream (0 for a stream alone)
    active: bool = True  # reads; a waiting member of a group does not
    resume: bool = False  # just made active: reads once the member it replaces has settled its deliveries
    start: int = 0  # where it began: a group with no acked offset resumes there
    start_ms: int | None = None  # and for a start by time, the time its records must reach
    out: int = 0  # its deliveries not settled yet
    resume_by: float | None = None  # made active and waiting: when the member it replaces is let go
    let_go: bool = False  # its deliveries came again to another member: their acks move no offset


@dataclass(slots=True)
class ReadBudget:
    """What stream reads may still take in this turn of the event loop."""
    records: int = WAKE_RECORDS
    bytes: int = WAKE_BYTES

    def refill(self) -> None:
        self.records, self.bytes = WAKE_RECORDS, WAKE_BYTES


class StreamQueue(Destination):
    __slots__ = ("data_dir", "end", "first", "last_timestamp_ms", "readers", "tracked", "track_pending",
                 "groups", "handover_timeout", "_in_flight", "_turn", "_sources", "_keys")

    is_log = True

    def __init__(self, name: str, *, data_dir: Path, vhost: str = "/", durable: bool = True,
                 arguments: Mapping[str, Any] | None = None, args: QueueArgs | None = None,
                 held: HeldTally | None = None, handover_timeout: float = 10.0) -> None:
        super().__init__(name, "stream", vhost=vhost, durable=durable, exclusive_owner=None, auto_delete=False,
                         arguments=arguments, args=args, held=held)
        self.data_dir = data_dir
        self.end = 0  # committed end: the offset the next append gets
        self.first = 0  # oldest offset still on disk
        self.last_timestamp_ms: int | None = None
        # by the consumer itself: a tag is unique on its channel only (two channels may share one)
        self.readers: dict[Consumer[Any], StreamReader] = {}
        self.tracked: dict[str, int] = {}  # consumer name -> last acked offset
        self.track_pending = False  # tracked changed since the flusher last wrote it
        self.groups: dict[str, list[Consumer[Any]]] = {}  # single active consumer: group -> members, oldest first
        self.handover_timeout = handover_timeout  # seconds a demoted member may hold a partition
        self._in_flight = 0
        self._turn = 0  # which consumer starts the next dispatch
        self._sources: dict[bytes, str] = {}  # record meta bytes -> source exchange
        self._keys: dict[bytes, str] = {}  # routing key bytes -> text

    # ------------------------------------------------------------------ counts
    @property
    def messages_ready(self) -> int:
        return max(self.end - self.first, 0)

    @property
    def messages_unacked(self) -> int:
        return 0  # as RabbitMQ's streams: the log's length is the count; deliveries hold only credit

    @property
    def in_flight(self) -> int:
        return self._in_flight

    # ------------------------------------------------------------------ log
    def restore(self, end: int, first: int, tracked: dict[str, int], last_ts: int | None) -> None:
        self.end, self.first, self.tracked, self.last_timestamp_ms = end, first, tracked, last_ts

    def appended(self, end: int, last_ts: int | None, first: int) -> None:
        self.end = end
        self.first = first
        if last_ts is not None:
            self.last_timestamp_ms = last_ts

    def enqueue(self, message: Message, now: float, left: list[Left] | None = None) -> EnqueueOutcome:
        """Nothing is kept here: the delivery owner appends the record to the log with the store."""
        self.stats.published += 1
        return LOGGED

    def get(self, now: float, *, no_ack: bool, owner: object, left: list[Left] | None = None) -> QueueEntry | None:
        raise ChannelException(ReplyCode.NOT_IMPLEMENTED,
                               f"NOT_IMPLEMENTED - basic.get not supported by stream queues {self._rs()}")

    def _rs(self) -> str:
        return f"queue '{self.name}' in vhost '{self.vhost}'"

    # ------------------------------------------------------------------ consumers
    def prepare_consumer(self, consumer: Consumer[Any], arguments: Mapping[str, Any], now: float) -> None:
        """Check a new consumer as RabbitMQ does and place its cursor (before ``add_consumer``)."""
        if not consumer.prefetch:  # checked first, as RabbitMQ's stream queue does
            raise errors.precondition_failed(f"consumer prefetch count is not set for stream {self._rs()}")
        if consumer.no_ack:
            raise ChannelException(ReplyCode.NOT_IMPLEMENTED, "NOT_IMPLEMENTED - automatic acknowledgement "
                                   f"not supported by stream queues {self._rs()}")
        name = consumer_name(arguments, consumer.tag)
        spec = arguments.get("x-stream-offset", "next")
        placed = start_offset(spec, now, self.first, self.end, self._at_time)
        start, from_ms = placed.offset, placed.from_ms
        wanted = consumer_filter(arguments, self._rs())
        sac = single_active(arguments, name, self._rs())
        index = partition_index(arguments, self.name, self._rs()) if sac else 0  # every check before anything is kept
        if name is not None and name in self.tracked and (sac or spec in ("next", b"next")):
            start, from_ms = self.tracked[name] + 1, None  # resume after the last acked offset (a group's always)
        cursor = StreamCursor(self.data_dir, self.vhost, self.name, start, wanted, from_ms)
        reader = StreamReader(consumer, cursor, name, start=start, start_ms=from_ms)
        self.readers[consumer] = reader
        if sac and name is not None:
            reader.group, reader.index, reader.active = name, index, False
            self.groups.setdefault(name, []).append(consumer)
            self._rebalance(name)

    def _rebalance(self, group: str) -> None:
        """Make member ``index mod members`` of ``group`` the active one (``_take_over`` starts it)."""
        members = self.groups.get(group, [])
        for position, member in enumerate(members):
            reader = self.readers[member]
            active = position == reader.index % len(members)
            if active and not reader.active:
                reader.resume, reader.resume_by = True, None
            reader.active = active

    def _take_over(self, reader: StreamReader, now: float) -> bool:
        """Whether a newly active member may read: not while the member it replaces still has
        deliveries out (their acks move the group's offset; the settle dispatches again), for
        ``handover_timeout`` at most (``_let_go``; the deadline heap dispatches the queue then).
        Then it reads on right after the group's last acked offset, or from its own start when
        the group has acked nothing (a member made active again has read on past what it gave
        back), so what the group acked is not delivered again and what it had not acked is."""
        group = reader.group
        holding = [self.readers[m] for m in self.groups.get(group or "", ()) if self.readers[m].out]
        if any(other is not reader for other in holding):
            if reader.resume_by is None:
                reader.resume_by = now + self.handover_timeout
                self.timed = True  # next_deadline has it
            if now < reader.resume_by:
                return False
            for other in holding:
                if other is not reader:
                    self._let_go(other)
        reader.resume, reader.resume_by = False, None
        acked = group is not None and group in self.tracked
        offset = self.tracked[group or ""] + 1 if acked else reader.start
        if offset != reader.cursor.offset:
            wanted = reader.cursor.filter
            reader.cursor.close()
            reader.cursor = StreamCursor(self.data_dir, self.vhost, self.name, offset, wanted,
                                         None if acked else reader.start_ms)
        return True

    def _let_go(self, reader: StreamReader) -> None:
        """A demoted member held its deliveries past the handover bound: they stay with the old
        reader object (their settles return the member's credit, their acks move no offset) and
        the member goes on as a fresh reader with nothing out."""
        reader.let_go = True
        self.readers[reader.consumer] = StreamReader(reader.consumer, reader.cursor, reader.name, reader.group,
                                                     reader.index, reader.active, reader.resume, reader.start,
                                                     reader.start_ms)

    def next_deadline(self) -> float | None:
        """When a member waiting to take a partition over stops waiting for the one it replaces."""
        due = [r.resume_by for r in self.readers.values() if r.active and r.resume and r.resume_by is not None]
        return min(due) if due else None

    def release_delayed(self, now: float) -> bool:
        """At a deadline: whether a waiting member's handover bound has passed (it reads now)."""
        return any(r.active and r.resume and r.resume_by is not None and r.resume_by <= now
                   for r in self.readers.values())

    def _at_time(self, timestamp_ms: int) -> int:
        """At or before the time, without reading a tiered segment: the cursor steps over what is
        earlier (``Start.from_ms``)."""
        return offset_at_time(self.data_dir, self.vhost, self.name, timestamp_ms, self.end)

    def remove_consumer(self, consumer: Consumer[Any]) -> Consumer[Any] | None:
        reader = self.readers.pop(consumer, None)
        if reader is not None:
            reader.cursor.close()
            if reader.group is not None:  # the group's partitions move to the members left
                members = self.groups[reader.group]
                members.remove(consumer)
                if members:
                    self._rebalance(reader.group)
                else:
                    del self.groups[reader.group]
        return super().remove_consumer(consumer)

    def dispatch(self, now: float, left: list[Left] | None = None, delivered: list[QueueEntry] | None = None,
                 budget: Any = None) -> int:
        return self.read_on(budget if isinstance(budget, ReadBudget) else ReadBudget(), now)

    def read_on(self, budget: ReadBudget, now: float) -> int:
        """Each consumer with credit reads its own window of the log; nothing is shared or kept.
        What is read comes out of ``budget``, which the delivery owner shares by all streams and
        refills once per turn of the event loop: a consumer catching up from the start of a long
        stream never holds the loop for long. Where the budget cut a dispatch short,
        ``backlogged`` is set and the delivery owner has it called again after other work.
        Consumers take turns in starting a call."""
        readers = list(self.readers.values())
        self.backlogged = False
        if not readers:
            return 0
        end = self.end
        count = 0
        n = len(readers)
        first = self._turn % n
        for i in range(n):
            reader = readers[(first + i) % n]
            if not reader.active or (reader.resume and not self._take_over(reader, now)):
                continue
            consumer = reader.consumer
            cursor = reader.cursor
            while cursor.offset < end and consumer.can_take():
                if budget.records <= 0 or budget.bytes <= 0:
                    self.backlogged = True
                    self._turn = (first + i) % n  # the one cut short starts the next call
                    self.stats.delivered += count
                    return count
                batch = cursor.read(end, min(consumer.prefetch - consumer.unacked, budget.records), budget.bytes)
                if batch is None:
                    read = cursor.take_read()
                    if read is not None:  # a tiered segment: read off the event loop, then dispatched again
                        self.reads_wanted.append(read)
                    break
                budget.bytes -= batch.size
                budget.records -= batch.count
                count += self._hand(reader, batch, now)
        self._turn = first + 1
        self.stats.delivered += count
        return count

    def _hand(self, reader: StreamReader, batch: StreamBatch, now: float) -> int:
        """One delivery per record of the batch, built straight from the read bytes: the offset
        header is spliced into the stored properties, the source exchange and routing key come
        from small caches (a stream's records mostly share them). A filtered consumer gets only
        the records its filter matches (the chunk filter is probabilistic): the others are not
        delivered and take no credit, as in RabbitMQ. Returns the deliveries made."""
        data, scan = batch.data, batch.scan
        bounds, offsets, stamps = scan.bounds, scan.offsets, scan.timestamps
        consumer = reader.consumer
        deliver = consumer.sink.deliver
        records: Sequence[int] = range(batch.skip, batch.skip + batch.count)
        wanted = reader.cursor.filter
        if wanted is not None:
            records = [r for r in records if wanted.matches(filter_value(data[bounds[5 * r + 3]:bounds[5 * r + 4]]))]
        consumer.unacked += len(records)
        reader.out += len(records)
        self._in_flight += len(records)
        sources, keys = self._sources, self._keys
        if len(sources) > NAME_CACHE or len(keys) > NAME_CACHE:
            sources.clear()
            keys.clear()
        for r in records:
            b = 5 * r
            rk_at, meta_at, props_at, body_at = bounds[b + 1], bounds[b + 2], bounds[b + 3], bounds[b + 4]
            raw_key = data[rk_at:meta_at]
            key = keys.get(raw_key)
            if key is None:
                key = keys[raw_key] = raw_key.decode("utf-8", "replace")
            meta = data[meta_at:props_at]
            source = sources.get(meta)
            if source is None:
                source = sources[meta] = (json.loads(meta).get("x") or "") if meta else ""
            offset = offsets[r]
            message = Message(0, source, key, with_int_header(data[props_at:body_at], OFFSET_HEADER, offset),
                              data[body_at:bounds[b + 5]], True, 0, None, None, stamps[r] / 1000)
            deliver(consumer, self, QueueEntry(offset, message, False, 0, None, reader), now)
        return len(records)

    # ------------------------------------------------------------------ settle: credit only
    def _release(self, entry: QueueEntry) -> bool:
        reader = entry.owner
        if not isinstance(reader, StreamReader):
            return False
        entry.owner = None
        reader.consumer.unacked -= 1
        reader.out -= 1
        self._in_flight -= 1
        return True

    def ack(self, entry: QueueEntry, left: list[Left] | None = None) -> None:
        reader = entry.owner
        if self._release(entry) and isinstance(reader, StreamReader) and reader.name is not None and not reader.let_go:
            if entry.seq > self.tracked.get(reader.name, -1):
                self.tracked[reader.name] = entry.seq
                self.track_pending = True

    def requeue(self, entry: QueueEntry, left: list[Left] | None = None) -> None:
        self._release(entry)

    def reject(self, entry: QueueEntry, left: list[Left] | None = None) -> None:
        self._release(entry)

    def settle_request(self) -> bool:
        """Acks moved a named consumer's offset: the flusher is to write the tracked offsets."""
        pending, self.track_pending = self.track_pending, False
        return pending

    # ------------------------------------------------------------------ nothing held in memory
    def purge(self, left: list[Left] | None = None) -> int:
        """A log is truncated by retention only, as in RabbitMQ."""
        raise errors.not_implemented(f"queue.purge not supported by stream queues {self._rs()}")

    def delete(self) -> list[Consumer[Any]]:
        for reader in self.readers.values():
            reader.cursor.close()
        self.readers.clear()
        return super().delete()

    # ------------------------------------------------------------------ reporting
    def describe_consumers(self) -> list[dict[str, Any]]:
        """Each consumer's next offset and lag (messages committed it has not been sent yet)."""
        return [{"consumer_tag": reader.consumer.tag, "name": reader.name, "offset": reader.cursor.offset,
                 "lag": max(self.end - reader.cursor.offset, 0), "single_active_group": reader.group,
                 "active": reader.active} for reader in self.readers.values()]

    def describe_groups(self) -> list[GroupPosition]:
        """The single-active groups with members, then the names with only a stored offset. Lag
        counts from the group's last acked offset (with none yet, from the active member's next
        offset, or from the first offset when no member reads), as Kafka's consumer lag does."""
        out: list[GroupPosition] = []
        for name in [*self.groups, *(n for n in self.tracked if n not in self.groups)]:
            members = self.groups.get(name, [])
            active = next((self.readers[m] for m in members if self.readers[m].active), None)
            committed = self.tracked.get(name)
            start = committed + 1 if committed is not None else active.cursor.offset if active else self.first
            out.append(GroupPosition(name, len(members), active.consumer if active else None, committed,
                                     max(self.end - max(start, self.first), 0)))
        return out

    def log_info(self) -> dict[str, Any]:
        """What the HTTP API and CLI show: size on disk, offsets, and each consumer's lag."""
        stats = stream_stats(self.data_dir, self.vhost, self.name)
        last = self.end - 1 if self.end > self.first else None
        consumers = self.describe_consumers()
        return {
            "type": "stream", "size_on_disk": stats.size, "segments": stats.segments,
            "first_offset": self.first if last is not None else None, "last_offset": last,
            "first_timestamp": stats.first_timestamp_ms, "last_timestamp": self.last_timestamp_ms,
            "consumers": consumers, "tracked_offsets": dict(self.tracked),
        }
