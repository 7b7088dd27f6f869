"""One open AMQP channel as the broker sees it: consumers, delivery tags, prefetch, confirms, tx.

Rule 1: a ``ChannelSession`` owns its delivery-tag -> (queue, entry) table, its consumers, its
prefetch settings and its confirm sequence; only its own handlers change them.
Rule 2: it is the ``ConsumerSink`` its queues deliver into: ``deliver`` encodes straight into the
connection's outgoing buffer (no task, no await, no call back into the broker), and
``has_capacity`` is the credit predicate (prefetch window, client flow, outgoing buffer under its
high-water mark). Everything that changes a queue goes through the broker's delivery owner, which
dispatches on its own.
The basic.consume/cancel/get/qos and channel.flow handlers are functions over a ``ChannelSession``
in consume.py, and basic.publish (one and in runs) and tx.commit's replay are in publish.py: they
change this state on the channel's behalf.
"""

from __future__ import annotations

from collections import deque
from itertools import repeat
from operator import attrgetter
from typing import Any, Protocol

from headrace.queues import Consumer, Destination, QueueEntry
from headrace.server.amqp import methods as m
from headrace.server.amqp.errors import ChannelException, ConnectionException
from headrace.server.amqp.spec import ReplyCode
from headrace.server.broker import Settle, errors
from headrace.server.broker.dead_letters import with_counts, with_delivery_count
from headrace.server.broker.node import connection_label
from headrace.server.broker.reply_to import ReplyConsumer

from .channel_stats import ChannelStats
from .permissions import Permissions
from .state import SessionState
from .ack_stamps import AckStamps
from .tx import Tagged, Transaction

__all__ = ["ChannelSession", "ConfirmWaiter", "OUTBOX_HIGH_WATER"]

_redelivered = attrgetter("redelivered")

# Deliveries stop being encoded for a connection once this many bytes wait for its socket; the
# writer sends them in one call, and when it has drained the consumers are dispatched again. 1 MiB
# keeps a few hundred small messages in flight per connection without letting a slow reader grow
# the broker's memory.
OUTBOX_HIGH_WATER = 1 << 20


class ConfirmWaiter(Protocol):
    """Who releases a channel's confirms after the store syncs (``ConfirmsAndTx``, which sits
    above the channel and handles confirm.select/tx.* on it): the channel only reports in."""

    def confirming(self, ch: ChannelSession) -> None: ...

    def channel_closed(self, ch: ChannelSession) -> None: ...


class ChannelSession:
    __slots__ = (
        "session", "conn", "out", "id", "vhost", "next_tag", "unacked", "unacked_from", "consumers", "prefetch_count",
        "global_prefetch", "active", "confirm", "publish_seq", "pending_confirms", "tx",
        "txn", "acks", "last_ticket",
        "delivery", "perms", "confirms", "reply", "stats", "split_counts", "nack_requeue", "failed_requeue",
        "timeouts",
    )

    def __init__(self, session: SessionState, channel_id: int, perms: Permissions,
                 confirms: ConfirmWaiter) -> None:
        self.session = session
        self.conn = session.conn
        self.out = session.conn.writer  # its outgoing frames: deliveries go straight in, credit reads their size
        self.id = channel_id
        self.vhost = session.vhost
        self.delivery = session.broker.delivery
        self.perms = perms
        self.confirms = confirms
        self.next_tag = 1
        # delivery tag -> (queue, entry); tags only grow, so the first key is the oldest delivery
        self.unacked: dict[int, tuple[Destination, QueueEntry]] = {}
        # no tag in ``unacked`` is below this: a plain dict's first key is a walk past every slot
        # popped since it last grew, so the oldest is found from here (``oldest_unacked``)
        self.unacked_from = 1
        self.consumers: dict[str, tuple[Destination, Consumer[Any]]] = {}
        self.prefetch_count = 0  # per new consumer (global=False, RabbitMQ's meaning)
        self.global_prefetch = 0  # shared by the channel (global=True)
        self.active = True  # channel.flow from the client
        self.confirm = False
        self.publish_seq = 0
        # (seq, store ticket, nack) in publish order, released once the store has synced the ticket
        self.pending_confirms: deque[tuple[int, int, bool]] = deque()
        self.tx = False
        self.stats = ChannelStats()
        self.txn = Transaction()  # what tx mode holds until commit (its bytes count in session.tx_bytes)
        # when deliveries needing an ack were made, for the consumer timeout (None: it is off)
        timeout_ms = session.broker.limits.consumer_timeout_ms
        self.acks = AckStamps(timeout_ms / 1000) if timeout_ms else None
        self.last_ticket = 0  # store ticket of this channel's latest persistent publish
        self.reply: ReplyConsumer | None = None  # the direct reply-to consumer, if any
        # RabbitMQ 4.3 counts a failed return apart from an acquisition (broker/compat.py): a nack
        # returns without a failure, a reject or a lost channel with one; before, every return counted
        self.split_counts = session.broker.compat.split_counts
        self.nack_requeue = Settle.RETURN if self.split_counts else Settle.REQUEUE
        self.failed_requeue = Settle.FAIL if self.split_counts else Settle.REQUEUE
        self.timeouts: dict[str, float] = {}  # consumer tag -> its own timeout (4.3: consumer_timeout.py)

    # ------------------------------------------------------------------ ConsumerSink
    def has_capacity(self) -> bool:
        if not self.active:
            return False
        if self.global_prefetch and len(self.unacked) + self.txn.taken >= self.global_prefetch:
            return False
        if self.out.bytes_pending >= OUTBOX_HIGH_WATER:
            self.session.outbox_full = True
            return False
        return True

    def credit(self) -> int:
        """``has_capacity`` as a count, for a queue that plans a turn's deliveries at once
        (``Consumer.runs``): how many more the channel-wide prefetch allows, -1 when it is off, 0
        when the channel has no room. A turn then goes out whole, so the outgoing buffer may pass
        its high-water mark by at most the consumers' prefetch windows."""
        if not self.active:
            return 0
        if self.out.bytes_pending >= OUTBOX_HIGH_WATER:
            self.session.outbox_full = True
            return 0
        if self.global_prefetch:
            return max(self.global_prefetch - len(self.unacked) - self.txn.taken, 0)
        return -1

    def deliver_run(self, consumer: Consumer[Any], queue: Destination, entries: list[QueueEntry],
                    now: float) -> None:
        """``deliver`` of an ack-mode consumer's turn: the tags, the unacked table and the frames
        (``FrameWriter.send_delivers``, one encoding call) at once."""
        if queue.counts_deliveries or self.vhost.tracing:
            for entry in entries:
                self.deliver(consumer, queue, entry, now)
            return
        tag = self.next_tag
        count = len(entries)
        self.next_tag = tag + count
        self.unacked.update(zip(range(tag, tag + count), zip(repeat(queue), entries)))
        acks = self.acks
        if acks is not None and now >= acks.next_at:
            self.stamp(acks, tag, now)
        redelivered = sum(map(_redelivered, entries))
        if redelivered:
            self.stats.redelivered += redelivered
        self.out.send_delivers(self.id, consumer.tag, tag, entries)
        self.session.wake()

    def deliver(self, consumer: Consumer[Any], queue: Destination, entry: QueueEntry, now: float) -> None:
        tag = self.next_tag
        self.next_tag = tag + 1
        msg = entry.message
        if not consumer.no_ack:
            self.unacked[tag] = (queue, entry)
            acks = self.acks
            if acks is not None and now >= acks.next_at:
                self.stamp(acks, tag, now)
        else:
            self.stats.delivered_no_ack += 1
        if entry.redelivered:
            self.stats.redelivered += 1
        props_raw = msg.props_raw
        if entry.redelivered and queue.counts_deliveries:
            props_raw = self.counted(props_raw, entry)
        self.out.send_deliver(self.id, consumer.tag, tag, entry.redelivered, msg.exchange,
                              msg.routing_key, props_raw, msg.body)
        self.session.wake()
        if self.vhost.tracing:
            self.trace_delivery(queue, entry)

    def counted(self, props_raw: bytes, entry: QueueEntry) -> bytes:
        """A redelivery's properties with the counts its queue keeps: ``x-delivery-count`` (every
        return; RabbitMQ 4.3: the failed ones) and, under 4.3, ``x-acquired-count``."""
        if self.split_counts:
            return with_counts(props_raw, entry.delivery_count, max(entry.acquired_count, entry.delivery_count))
        if entry.delivery_count:
            return with_delivery_count(props_raw, entry.delivery_count)
        return props_raw

    def trace_delivery(self, queue: Destination, entry: QueueEntry) -> None:
        """The firehose's copy of a delivery from a traced vhost (broker/firehose.py)."""
        session = self.session
        user = session.user
        assert user is not None  # a channel opens only after connection.open
        session.broker.firehose.delivered(self.vhost, queue.name, entry.message, entry.redelivered,
                                          connection_label(session.peer, session.local), self.id, user.name)

    def deliver_reply(self, consumer_tag: str, exchange: str, routing_key: str, props_raw: bytes,
                      body: bytes) -> None:
        """A direct reply-to reply: delivered at once, no ack, outside prefetch (as RabbitMQ)."""
        tag = self.next_tag
        self.next_tag = tag + 1
        self.stats.delivered_no_ack += 1
        self.out.send_deliver(self.id, consumer_tag, tag, False, exchange, routing_key, props_raw, body)
        self.session.wake()

    def stamp(self, acks: AckStamps, tag: int, now: float) -> None:
        """A delivery needing an ack opens a stamp (ack_stamps.py); the channel's first arms its
        session's consumer-timeout deadline."""
        if acks.stamp(tag, now):
            self.session.arm_deadline(now + acks.grain + acks.limit)

    def ack_due(self) -> float | None:
        """When this channel's oldest unacked delivery times out (None: nothing can)."""
        acks = self.acks
        if acks is None:
            return None
        return acks.due(self.oldest_unacked())

    def oldest_unacked(self) -> int | None:
        """The oldest unacked delivery's tag (None: none), walking up from ``unacked_from``:
        amortized over the tags given out, as that mark only rises."""
        unacked = self.unacked
        if not unacked:
            return None
        tag = self.unacked_from
        while tag not in unacked:
            tag += 1
        self.unacked_from = tag
        return tag

    def consumer_cancelled(self, consumer: Consumer[Any]) -> None:
        """The queue went away under the consumer: tell clients that asked to be told."""
        if self.consumers.pop(consumer.tag, None) is None:
            return
        if self.session.capabilities.get("consumer_cancel_notify"):
            # sent after the reply to the method being handled (e.g. the queue.delete-ok of this
            # very channel), as RabbitMQ's asynchronous notification arrives after it
            self.session.deferred.append((self.id, m.BasicCancel(consumer_tag=consumer.tag, nowait=True)))
            self.session.wake()

    # ------------------------------------------------------------------ helpers
    def _settle(self, items: list[tuple[Destination, QueueEntry]], action: Settle) -> None:
        """Settle deliveries; with a channel-wide prefetch every consumer of the channel got credit."""
        ready = [q for q, _ in self.consumers.values()] if self.global_prefetch else ()
        self.delivery.settle(self.vhost, items, action, self.session.now, ready)

    # ------------------------------------------------------------------ confirms
    def flush_confirms(self, synced: int) -> int:
        """Send acks for every confirm whose store ticket is synced, as few frames as possible
        (``multiple=True`` covers a run). Returns how many still wait for the store."""
        pending = self.pending_confirms
        last_ack = 0
        count = confirmed = 0
        send = self.conn.send_method
        # tickets the store failed to write (disk full) are nacked, not confirmed
        failed_lo, failed_hi = self.session.broker.failing or (0, 0)
        while pending and pending[0][1] <= synced:
            seq, ticket, nack = pending.popleft()
            if nack or failed_lo < ticket <= failed_hi:
                if last_ack:
                    send(self.id, m.BasicAck(delivery_tag=last_ack, multiple=count > 1))
                    last_ack = count = 0
                send(self.id, m.BasicNack(delivery_tag=seq, multiple=False, requeue=False))
            else:
                last_ack = seq
                count += 1
                confirmed += 1
        if last_ack:
            send(self.id, m.BasicAck(delivery_tag=last_ack, multiple=count > 1))
        self.vhost.confirmed += confirmed
        self.stats.confirmed += confirmed
        return len(pending)

    # ------------------------------------------------------------------ settle
    def _take(self, tag: int, multiple: bool) -> list[tuple[Destination, QueueEntry]]:
        """The deliveries an ack, nack or reject names, out of the unacked table. RabbitMQ's rule:
        the tag itself must be unacked (with ``multiple``, the deliveries up to it go too), and
        tag 0 with ``multiple`` is every one; anything else is 406 "unknown delivery tag"."""
        unacked = self.unacked
        if multiple and tag == 0:
            taken = list(unacked.values())
            unacked.clear()
            return taken
        if tag not in unacked:
            raise errors.precondition_failed(f"unknown delivery tag {tag}")
        if not multiple:
            return [unacked.pop(tag)]
        first = self.oldest_unacked()  # tags rise and go in as delivered
        assert first is not None  # ``tag`` is in the table
        self.unacked_from = tag + 1
        table: dict[int, Any] = unacked  # the pairs, or None for a tag it does not hold
        pop = table.pop
        taken = [pop(held, None) for held in range(first, tag + 1)]
        if None in taken:  # gaps (no-ack deliveries, single acks): in tag order still
            return [pair for pair in taken if pair is not None]
        return taken

    def _take_tagged(self, tag: int, multiple: bool) -> Tagged:
        """``_take`` with each delivery's tag, for a transaction that may give them back."""
        unacked = self.unacked
        if multiple and tag == 0:
            tags = list(unacked)
        elif tag not in unacked:
            raise errors.precondition_failed(f"unknown delivery tag {tag}")
        elif multiple:
            tags = [held for held in unacked if held <= tag]
        else:
            tags = [tag]
        return [(held, unacked.pop(held)) for held in tags]

    def ack(self, method: m.BasicAck) -> None:
        if self.tx:  # taken now, settled at commit, given back at rollback (tx.py)
            self.txn.hold_settlement(self._take_tagged(method.delivery_tag, method.multiple), Settle.ACK)
            return
        items = self._take(method.delivery_tag, method.multiple)
        self.session.acked += 1
        self.stats.acked += len(items)
        self._settle(items, Settle.ACK)

    def nack(self, tag: int, multiple: bool, requeue: bool) -> None:
        action = self.nack_requeue if requeue else Settle.REJECT
        if self.tx:  # a nack of several tags is held like an ack
            self.txn.hold_settlement(self._take_tagged(tag, multiple), action)
            return
        self._settle(self._take(tag, multiple), action)

    def reject(self, tag: int, requeue: bool) -> None:
        """basic.reject: as a nack of one tag, except that under RabbitMQ 4.3's counting a requeue
        counts a failed delivery (toward the delivery limit) where a nack's does not."""
        action = self.failed_requeue if requeue else Settle.REJECT
        if self.tx:
            self.txn.hold_settlement(self._take_tagged(tag, False), action)
            return
        self._settle(self._take(tag, False), action)

    def settle_held(self, taken: Tagged, action: Settle) -> None:
        """tx.commit applies a settlement the transaction held."""
        items = [item for _, item in taken]
        if action is Settle.ACK:
            self.session.acked += 1
            self.stats.acked += len(items)
        self._settle(items, action)

    def recover(self, method: m.BasicRecover | m.BasicRecoverAsync) -> None:
        if not method.requeue:
            # RabbitMQ does not redeliver to the original consumer: a connection error, not a
            # silent requeue the client did not ask for
            raise ConnectionException(ReplyCode.NOT_IMPLEMENTED, "NOT_IMPLEMENTED - requeue=false")
        self.requeue_all()
        if type(method) is m.BasicRecover:
            self.conn.send_method(self.id, m.BasicRecoverOk())

    def requeue_all(self) -> None:
        """basic.recover and channel close: every unacked delivery goes back to its queue."""
        items = list(self.unacked.values())
        self.unacked.clear()
        self.delivery.settle(self.vhost, items, self.failed_requeue, self.session.now)

    def cancel_reply(self) -> None:
        """Drop the direct reply-to consumer (basic.cancel of its tag, or the channel closing)."""
        if self.reply is not None:
            self.session.broker.replies.cancel(self.reply)
            self.reply = None

    # ------------------------------------------------------------------ tx
    def tx_rollback(self) -> None:
        """Drop the held publishes; the deliveries held settlements took are unacked again, in
        tag order, as RabbitMQ's rollback puts them back."""
        _, settlements, released = self.txn.take()
        self.session.hold_tx(-released)
        if not settlements:
            return
        restored = [pair for taken, _ in settlements for pair in taken]
        self.unacked = dict(sorted([*self.unacked.items(), *restored], key=_tag_of))
        self.unacked_from = next(iter(self.unacked))  # a new dict: its first slot is its first key
        acks = self.acks
        if acks is not None and not acks.stamps:  # the timeout's check had forgotten them
            self.stamp(acks, self.unacked_from, self.session.now)

    # ------------------------------------------------------------------ close
    def close(self) -> None:
        """The channel is gone: cancel its consumers and return every unacked message."""
        self.cancel_reply()
        now = self.session.now
        for queue, consumer in list(self.consumers.values()):
            self.delivery.remove_consumer(self.vhost, queue, consumer, now)
        self.consumers.clear()
        self.timeouts.clear()
        self.tx_rollback()  # what the transaction took is unacked again, and requeued with the rest
        self.requeue_all()
        self.pending_confirms.clear()
        self.confirms.channel_closed(self)



def _tag_of(pair: tuple[int, tuple[Destination, QueueEntry]]) -> int:
    return pair[0]
