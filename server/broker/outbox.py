"""The two outboxes between the synchronous broker and the shell's disk tasks.

Rule 1: a ``StoreOutbox`` owns the message-store ops waiting for the flusher, in the order they
must reach the disk, and the ticket counter confirms wait on; a ``MirrorOutbox`` owns the records
waiting for the mirror writer. ``add`` is the one way in ("append; if it is the first, wake the
task"), the shell's task is the one way out (``take``). The mirror outbox holds the messages
themselves (a list append on the event loop); the writer frames them in its own thread
(``MirrorLog.append_messages``), calling ``mirror_row`` only for one with headers, a content type or
a message id.
Rule 2: only the delivery owner adds message ops (Publish, Deliver, Ack, Delay, Undelay, PurgeQueue,
DropQueue); the flusher reports back with ``synced``.
"""

from __future__ import annotations

from collections.abc import Callable

from headrace.persistence.mirror_records import MirrorRow, encode_meta
from headrace.persistence.stream_log import StreamAppend, StreamOp
from headrace.persistence.store_ops import Delay, Publish, PurgeQueue, StoreOp
from headrace.queues import Message
from headrace.server.amqp.properties import decode_properties

__all__ = ["MIRROR_BACKLOG_MAX", "STORE_BACKLOG_MAX", "MirrorOutbox", "StoreOutbox", "mirror_row"]

# Mirror records waiting for the writer task. Beyond this, connections that publish stop being
# read until the writer catches up: ~50k records of a few hundred bytes bound the backlog to tens
# of MB while absorbing a disk hiccup of a second or two at full publish rate.
MIRROR_BACKLOG_MAX = 50_000
# Store ops waiting for the flusher, the same bound for the same reason: publishers without confirms
# are not held back by the fsync, and a Publish op keeps its body alive after the queue has spilled
# the message, so two fast producers of persistent messages grew this to ~500k ops (~200 MB).
STORE_BACKLOG_MAX = 50_000


class StoreOutbox:
    __slots__ = ("enabled", "ops", "ticket", "synced", "backlog_max", "on_pending")

    def __init__(self, enabled: bool, on_pending: Callable[[], None]) -> None:
        self.enabled = enabled
        self.ops: list[StoreOp | StreamOp] = []
        self.ticket = 0  # counts the ops a reply may wait for (Publish, Delay, PurgeQueue)
        self.synced = 0  # the highest ticket the flusher has made durable
        self.backlog_max = STORE_BACKLOG_MAX  # publishing connections pause at this backlog
        self.on_pending = on_pending  # the shell wakes its flusher here (``ShellPorts.wake_flusher``)

    def add(self, op: StoreOp | StreamOp) -> None:
        ops = self.ops
        ops.append(op)
        if len(ops) == 1:
            self.on_pending()

    def add_ticketed(self, op: Publish | Delay | PurgeQueue | StreamAppend) -> int:
        """Add an op a confirm (or purge-ok) waits for; returns the ticket that covers it."""
        self.ticket += 1
        self.add(op)
        return self.ticket

    def take(self, limit: int | None = None) -> tuple[list[StoreOp | StreamOp], int]:
        """The oldest ops (at most ``limit``) and the ticket they cover: one group commit."""
        ops = self.ops
        if limit is None or len(ops) <= limit:
            self.ops = []
            return ops, self.ticket
        taken, self.ops = ops[:limit], ops[limit:]
        # only Publish, Delay and PurgeQueue ops take a ticket; those left behind are not covered yet
        left = sum(1 for op in self.ops if isinstance(op, (Publish, Delay, PurgeQueue, StreamAppend)))
        return taken, self.ticket - left


class MirrorOutbox:
    """Messages waiting for the mirror writer, already grouped by log: the writer hands each list
    to its log as it is, with no pass over the messages on either side."""

    __slots__ = ("pending", "count", "on_pending")

    def __init__(self, on_pending: Callable[[], None]) -> None:
        self.pending: dict[tuple[str, str], list[Message]] = {}  # (vhost, exchange) -> messages
        self.count = 0
        self.on_pending = on_pending  # the mirror writer's wake (``ShellPorts.wake_mirror_writer``)

    def add(self, vhost: str, exchange: str, message: Message) -> None:
        try:
            self.pending[vhost, exchange].append(message)
        except KeyError:
            self.pending[vhost, exchange] = [message]
        self.count += 1
        if self.count == 1:
            self.on_pending()

    def take(self) -> dict[tuple[str, str], list[Message]]:
        pending, self.pending, self.count = self.pending, {}, 0
        return pending


def mirror_row(message: Message, source: str | None = None) -> MirrorRow:
    """The log record of a message (mirror logs and stream queues): headers as text for Spark,
    the raw properties and body untouched for AMQP consumers. Runs on the event loop for every
    mirrored or streamed publish, so a message without headers, content type or message id (the
    flag bits 15 and 7) is one tuple and no decoding."""
    headers = message.headers
    raw = message.props_raw
    ts = int(message.timestamp * 1000)
    if len(raw) >= 2 and (raw[0] & 0x80 or raw[1] & 0x80):
        props = decode_properties(raw)
        content_type, message_id = props.content_type, props.message_id
    elif not headers:
        return (ts, message.routing_key, raw, message.body, encode_meta(None, None, None, source))
    else:
        content_type = message_id = None
    text = {str(k): _text(v) for k, v in headers.items()} if headers else None
    return (ts, message.routing_key, raw, message.body, encode_meta(text, content_type, message_id, source))


def _text(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)
