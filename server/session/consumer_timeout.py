"""RabbitMQ 4.3's consumer timeout: per consumer, and a timed-out consumer is cancelled, not its
channel closed.

The timeout of a consumer is its ``x-consumer-timeout`` argument, else its queue's (the queue
argument, else the policy's ``consumer-timeout``: ``QueueArgs.consumer_timeout_ms``), else the
broker's ``consumer_timeout_ms``. When a delivery of that consumer has waited longer for its ack,
the consumer gets ``basic.cancel``, its unacked deliveries go back to the queue (a return that
counts no failure) and the channel stays open. A ``basic.get`` delivery has no consumer: past the
broker's timeout it closes the channel, as before.

Owner: these functions change a ``ChannelSession``'s state (its consumers, unacked table and
timeouts) on its behalf, as consume.py does; the session calls ``expire`` from its deadline
(``Session.deadline_due``) only when the broker follows 4.3 (``Compat.timeout_cancels``), so a
broker on 3.10 semantics keeps its one check per channel.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Mapping
from typing import Any

from headrace.queues import Destination
from headrace.server.broker import Settle, errors

from .ack_stamps import AckStamps
from .channel import ChannelSession

__all__ = ["TIMED_OUT", "consumer_timeout", "expire", "watch"]

TIMED_OUT = -1.0  # ``expire``'s answer for a channel a basic.get delivery timed out: close it


def consumer_timeout(ch: ChannelSession, queue: Destination, arguments: Mapping[str, Any]) -> float | None:
    """Seconds a consumer's delivery may stay unacked (None: no timeout); 406 for a bad argument."""
    value = arguments.get("x-consumer-timeout")
    if value is not None:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise errors.precondition_failed(f"invalid x-consumer-timeout '{value}'")
        return value / 1000
    own = queue.args.consumer_timeout_ms
    if own is not None:
        return own / 1000
    default = ch.session.broker.limits.consumer_timeout_ms
    return default / 1000 if default else None


def watch(ch: ChannelSession, tag: str, timeout: float) -> None:
    """The consumer ``tag`` times out after ``timeout`` seconds; the channel's stamps follow the
    shortest timeout of its consumers."""
    ch.timeouts[tag] = timeout
    if ch.acks is None:
        ch.acks = AckStamps(timeout)
    else:
        ch.acks.tighten(timeout)
        if ch.acks.stamps:  # the deadline is armed at a channel's first stamp: this one is later
            ch.session.arm_deadline(ch.session.now + ch.acks.grain + timeout)


def expire(ch: ChannelSession, now: float) -> float | None:
    """Cancel the consumers of ``ch`` with a delivery past their timeout and return theirs; the
    answer is when the next delivery left times out (None: none can), or ``TIMED_OUT``."""
    acks = ch.acks
    if acks is None:
        return None
    if acks.due(ch.oldest_unacked()) is None:
        return None  # nothing unacked: the stamps are gone, the next delivery arms again
    default_ms = ch.session.broker.limits.consumer_timeout_ms
    default = default_ms / 1000 if default_ms else None
    limits: dict[int, float | None] = {id(consumer): ch.timeouts.get(tag) for tag, (_, consumer)
                                       in ch.consumers.items()}
    shortest = min([t for t in (*limits.values(), default) if t is not None], default=None)
    if shortest is None:
        return None
    first_tags, times = acks.times()
    if not times:
        return None
    expired: dict[str, None] = {}
    next_due: float | None = None
    slack = acks.slack
    for tag, (_, entry) in ch.unacked.items():
        at = times[max(bisect_right(first_tags, tag) - 1, 0)]
        if next_due is not None and at + slack + shortest >= next_due:
            break  # stamps rise with tags: nothing later is due sooner
        owner = entry.owner
        limit = limits.get(id(owner), default)
        if limit is None:
            continue
        due = at + slack + limit
        if due <= now:
            consumer_tag = getattr(owner, "tag", None)
            if consumer_tag is None or consumer_tag not in ch.consumers:
                return TIMED_OUT  # a basic.get delivery, or its consumer was cancelled already
            expired[consumer_tag] = None
        elif next_due is None or due < next_due:
            next_due = due
    for consumer_tag in expired:
        _cancel(ch, consumer_tag, now)
    if expired:
        return expire(ch, now) if ch.unacked else None
    return next_due


def _cancel(ch: ChannelSession, tag: str, now: float) -> None:
    """basic.cancel to the client (when it told it can take one), the consumer off its queue,
    then its unacked deliveries back, counting no failure (RabbitMQ 4.3)."""
    queue, consumer = ch.consumers[tag]
    ch.timeouts.pop(tag, None)
    ch.delivery.remove_consumer(ch.vhost, queue, consumer, now)
    ch.consumer_cancelled(consumer)
    held = [t for t, (_, entry) in ch.unacked.items() if entry.owner is consumer]
    items = [ch.unacked.pop(t) for t in held]
    if items:
        ch.delivery.settle(ch.vhost, items, Settle.RETURN, now)
