"""The consume and get paths of a channel: basic.consume/cancel/get/qos and channel.flow.

The state these change (a channel's consumers, its delivery tags and unacked table, its prefetch
settings, its direct reply-to consumer) is owned by the ``ChannelSession`` they are given
(channel.py); these are the handlers the session's method table calls for those methods, kept apart
from the per-delivery code the channel holds as the queues' ``ConsumerSink``. Queue changes go
through the broker's delivery owner, as everywhere in a session. The session's table points at
these functions directly, so a method costs the same call it did as a ``ChannelSession`` method.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Any

from headrace.queues import Consumer, Destination
from headrace.server.amqp import methods as m
from headrace.server.amqp.errors import ConnectionException
from headrace.server.amqp.spec import ReplyCode
from headrace.server.broker import errors
from headrace.server.broker.reply_to import REPLY_QUEUE

from .channel import ChannelSession
from .consumer_timeout import consumer_timeout, watch

__all__ = ["CHANNEL_METHODS", "cancel", "consume", "flow", "get", "qos"]


def consume(ch: ChannelSession, method: m.BasicConsume) -> None:
    tag = method.consumer_tag or "amq.ctag-" + secrets.token_urlsafe(16)
    if method.queue == REPLY_QUEUE and tag not in ch.consumers:
        ch.reply = ch.session.broker.replies.consume(ch, ch.reply, tag, method.no_ack)
        if not method.nowait:
            ch.conn.send_method(ch.id, m.BasicConsumeOk(consumer_tag=tag))
        return
    queue = _queue_for(ch, method.queue or ch.session.last_queue, "read")
    if tag in ch.consumers or (ch.reply is not None and ch.reply.tag == tag):
        raise ConnectionException(ReplyCode.NOT_ALLOWED,
                                  f"NOT_ALLOWED - attempt to reuse consumer tag '{tag}'", 60, 20)
    ch.delivery.check_consumer_allowed(ch.vhost, queue, method.exclusive)
    args = method.arguments or {}
    priority = args.get("x-priority", 0)
    if not isinstance(priority, int) or isinstance(priority, bool):
        raise errors.precondition_failed(f"invalid x-priority '{priority}'")
    consumer = Consumer(tag, ch, no_ack=method.no_ack, prefetch=ch.prefetch_count, runs=True,
                        exclusive=method.exclusive, priority=priority, channel_id=ch.id,
                        owner=ch.session, arguments=dict(args) or None)
    ch.delivery.prepare_consumer(queue, consumer, args, ch.session.now)
    if not method.no_ack and ch.session.broker.compat.timeout_cancels:
        timeout = consumer_timeout(ch, queue, args)
        if timeout is not None:
            watch(ch, tag, timeout)
    ch.consumers[tag] = (queue, consumer)
    if not method.nowait:
        ch.conn.send_method(ch.id, m.BasicConsumeOk(consumer_tag=tag))
    ch.delivery.add_consumer(ch.vhost, queue, consumer, ch.session.now)


def cancel(ch: ChannelSession, method: m.BasicCancel) -> None:
    item = ch.consumers.pop(method.consumer_tag, None)
    ch.timeouts.pop(method.consumer_tag, None)
    if ch.reply is not None and ch.reply.tag == method.consumer_tag:
        ch.cancel_reply()
    elif item is not None:
        ch.delivery.remove_consumer(ch.vhost, item[0], item[1], ch.session.now)
    if not method.nowait:
        ch.conn.send_method(ch.id, m.BasicCancelOk(consumer_tag=method.consumer_tag))


def get(ch: ChannelSession, method: m.BasicGet) -> None:
    queue = _queue_for(ch, method.queue or ch.session.last_queue, "read")
    entry = ch.delivery.get(ch.vhost, queue, ch.session.now, no_ack=method.no_ack, owner=ch)
    stats = ch.stats
    if entry is None:
        stats.get_empty += 1
        ch.conn.send_method(ch.id, m.BasicGetEmpty())
        return
    tag = ch.next_tag
    ch.next_tag = tag + 1
    msg = entry.message
    stats.redelivered += entry.redelivered
    if not method.no_ack:
        stats.got += 1
        ch.unacked[tag] = (queue, entry)
        acks = ch.acks
        if acks is not None and ch.session.now >= acks.next_at:
            ch.stamp(acks, tag, ch.session.now)
    else:
        stats.got_no_ack += 1
    props_raw = msg.props_raw
    if entry.redelivered and queue.counts_deliveries:
        props_raw = ch.counted(props_raw, entry)
    ch.conn.send_content(ch.id, m.BasicGetOk(
        delivery_tag=tag, redelivered=entry.redelivered, exchange=msg.exchange,
        routing_key=msg.routing_key, message_count=queue.messages_ready), props_raw, msg.body)
    if ch.vhost.tracing:
        ch.trace_delivery(queue, entry)


def qos(ch: ChannelSession, method: m.BasicQos) -> None:
    if method.prefetch_size:
        raise ConnectionException(ReplyCode.NOT_IMPLEMENTED,
                                  "NOT_IMPLEMENTED - prefetch_size!=0 (%d)" % method.prefetch_size, 60, 10)
    if method.global_:
        ch.session.broker.deprecated_used.add("global_qos")
        ch.global_prefetch = method.prefetch_count
        ch.delivery.consumer_ready(ch.vhost, _consumer_queues(ch), ch.session.now)
    else:
        # the spec's channel-level prefetch: consumers already on the channel take the new
        # limit too (celery raises it for ETA tasks and expects its consumer to get more)
        ch.prefetch_count = method.prefetch_count
        for _, consumer in ch.consumers.values():
            consumer.prefetch = method.prefetch_count
    ch.conn.send_method(ch.id, m.BasicQosOk())
    if not method.global_:  # qos-ok first, then deliveries
        ch.delivery.consumer_ready(ch.vhost, _consumer_queues(ch), ch.session.now)


def flow(ch: ChannelSession, active: bool) -> None:
    ch.active = active
    ch.conn.send_method(ch.id, m.ChannelFlowOk(active=active))
    if active:
        ch.delivery.consumer_ready(ch.vhost, _consumer_queues(ch), ch.session.now)


def _queue_for(ch: ChannelSession, name: str, kind: str) -> Destination:
    ch.perms.check(kind, name)
    queue = ch.vhost.get_queue(name)
    ch.vhost.check_exclusive(queue, ch.session)
    return queue


def _consumer_queues(ch: ChannelSession) -> list[Destination]:
    return list({q: None for q, _ in ch.consumers.values()})


# The basic.* and channel.flow methods, handled by the channel itself or by the functions above; the
# session merges this table with those of its parts.
CHANNEL_METHODS: dict[type, Callable[[ChannelSession, Any], None]] = {
    m.BasicQos: qos,
    m.BasicConsume: consume,
    m.BasicCancel: cancel,
    m.BasicGet: get,
    m.BasicAck: ChannelSession.ack,
    m.BasicNack: lambda ch, meth: ch.nack(meth.delivery_tag, meth.multiple, meth.requeue),
    m.BasicReject: lambda ch, meth: ch.reject(meth.delivery_tag, meth.requeue),
    m.BasicRecover: ChannelSession.recover,
    m.BasicRecoverAsync: ChannelSession.recover,
    m.ChannelFlow: lambda ch, meth: flow(ch, meth.active),
}
