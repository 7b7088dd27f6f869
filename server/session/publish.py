"""The publish path of a channel: basic.publish one at a time and in runs, what a placed publish
asks of the channel (counts, basic.return, its confirm's place in line), and tx mode's holding and
replaying of publishes.

The state these change (a channel's counters, its confirm sequence and pending confirms, its open
transaction) is owned by the ``ChannelSession`` they are given (channel.py); routing and enqueueing
go through the broker's delivery owner (``Delivery.publish`` / ``publish_run``), as everywhere in
a session. They are functions over the channel, as consume.py's are, so that the channel module
holds the per-delivery side it serves as the queues' ``ConsumerSink``, and the session calls these
directly: a publish costs the same call it did as a ``ChannelSession`` method.
"""

from __future__ import annotations

from typing import Any

from headrace.server.amqp import methods as m
from headrace.server.amqp.errors import ConnectionException
from headrace.server.amqp.events import ContentReceived, Event
from headrace.server.amqp.spec import ReplyCode
from headrace.server.broker import PublishResult
from headrace.server.broker.node import connection_label
from headrace.server.broker.reply_to import REPLY_TO_FLAG, rewrite_request
from headrace.server.broker.settlement import ROUTED
from headrace.server.broker.topic_auth import check_topic_write

from .channel import ChannelSession

__all__ = ["publish", "publish_run", "run_end", "tx_commit"]


def publish(ch: ChannelSession, event: ContentReceived) -> None:
    method = event.method
    if method.immediate:
        raise _immediate()
    _may_publish(ch, method.exchange, method.routing_key)
    if ch.tx:  # checked now as RabbitMQ does, held until commit
        ch.delivery.check_publish(ch.vhost, method.exchange, method.routing_key, event.props_raw)
        _tx_buffer(ch, event)
        return
    _apply(ch, event)


def _apply(ch: ChannelSession, event: ContentReceived) -> None:
    """Route and place a publish whose checks were made."""
    method = event.method
    props_raw = rewrite_request(event.props_raw, ch.reply)  # direct reply-to requests
    result = ch.delivery.publish(ch.vhost, method.exchange, method.routing_key, props_raw, event.body,
                                 ch.session.now, event.headers)
    if ch.vhost.tracing:  # once placed: a publish the broker refused (a bad expiration) entered nothing
        _trace(ch, method.exchange, method.routing_key, props_raw, event.body, event.headers)
    _published(ch, event, result)


def publish_run(ch: ChannelSession, events: list[ContentReceived]) -> None:
    """Publishes read together on this channel to one exchange and routing key, none with a
    headers table (``Session`` finds such runs): the permission checks are made once, and
    ``Delivery.publish_run`` routes once. In a transaction they are held one by one. A
    publish that fails ends the run where ``publish`` one by one would: those before it are
    placed and answered for, and the error is the first one met in order."""
    if ch.tx:
        for event in events:
            publish(ch, event)
        return
    method = events[0].method
    if method.immediate:
        raise _immediate()
    _may_publish(ch, method.exchange, method.routing_key)
    reply = ch.reply
    contents: list[tuple[bytes, bytes]] = []
    try:
        for event in events:
            if event.method is not method and event.method.immediate:  # the C scan shares one along a run
                raise _immediate()
            props_raw = event.props_raw
            if len(props_raw) > 1 and props_raw[0] & REPLY_TO_FLAG:  # ``rewrite_request``'s own first test
                props_raw = rewrite_request(props_raw, reply)
            contents.append((props_raw, event.body))
    finally:
        if contents:  # those before a failure, placed before it is raised (or one of theirs first)
            results: list[PublishResult] = []
            try:
                ch.delivery.publish_run(ch.vhost, method.exchange, method.routing_key, contents,
                                        ch.session.now, results)
            finally:
                if ch.vhost.tracing:  # the placed ones: ``results`` stops at a publish that failed
                    for props_raw, body in contents[:len(results)]:
                        _trace(ch, method.exchange, method.routing_key, props_raw, body, None)
                if not ch.confirm and all(result is ROUTED for result in results):
                    _published_routed(ch, len(results))  # the usual run: counts alone
                else:
                    for event, result in zip(events, results):
                        _published(ch, event, result)


def tx_commit(ch: ChannelSession) -> None:
    """Apply the whole transaction or none of it: every held publish is checked again (its
    exchange may have gone, its permission been revoked since) before the first is placed; then
    the publishes in order, then the settlements. A failed check raises with nothing applied, and
    the channel's close gives the transaction's deliveries back."""
    txn = ch.txn
    delivery = ch.delivery
    for event in txn.publishes:
        method = event.method
        _may_publish(ch, method.exchange, method.routing_key)
        delivery.check_publish(ch.vhost, method.exchange, method.routing_key, event.props_raw)
    publishes, settlements, released = txn.take()
    ch.session.hold_tx(-released)
    for event in publishes:
        _apply(ch, event)
    for taken, action in settlements:
        ch.settle_held(taken, action)


def _may_publish(ch: ChannelSession, exchange: str, routing_key: str) -> None:
    """Write permission on the exchange and, with topic permissions, on the routing key."""
    perms = ch.perms
    ok = perms.write_ok.get(exchange)
    if ok is None:
        ok = perms.allowed("write", exchange)
    if not ok:
        perms.check("write", exchange)
    session = ch.session
    if session.broker.users.topic_permissions:
        user = session.user
        assert user is not None  # a channel opens only after connection.open
        check_topic_write(session.broker.users, ch.vhost, user.name, exchange, routing_key)


def _trace(ch: ChannelSession, exchange: str, routing_key: str, props_raw: bytes, body: bytes,
           headers: dict[str, Any] | None) -> None:
    """The firehose's copy of a publish into a traced vhost (broker/firehose.py)."""
    session = ch.session
    user = session.user
    assert user is not None  # a channel opens only after connection.open
    session.broker.firehose.published(ch.vhost, exchange, routing_key, props_raw, body, headers,
                                      connection_label(session.peer, session.local), ch.id, user.name)


def _published_routed(ch: ChannelSession, count: int) -> None:
    """``_published`` for ``count`` publishes routed with nothing to wait for, outside confirm
    mode: nothing to return, nothing to confirm."""
    session = ch.session
    session.published += count
    ch.stats.published += count
    if session.broker.alarms and not session.blocked_sent:
        session.alarms_changed(session.broker.alarms)


def _published(ch: ChannelSession, event: ContentReceived, result: PublishResult) -> None:
    """What a placed publish asks of the channel: counts, basic.return when it was unroutable
    and mandatory, its confirm's place in line."""
    method = event.method
    if result.ticket:
        ch.last_ticket = result.ticket
    session = ch.session
    session.published += 1
    ch.stats.published += 1
    if session.broker.alarms and not session.blocked_sent:
        session.alarms_changed(session.broker.alarms)
    if not result.routed and method.mandatory:
        ch.vhost.unroutable_returned += 1
        ch.stats.returned += 1
        ch.conn.send_content(ch.id, m.BasicReturn(reply_code=312, reply_text="NO_ROUTE",
                             exchange=method.exchange, routing_key=method.routing_key),
                             event.props_raw, event.body)
    elif not result.routed:
        ch.stats.dropped += 1
    if ch.confirm:
        ch.vhost.received_confirm += 1
        ch.publish_seq += 1
        ch.pending_confirms.append((ch.publish_seq, result.ticket, result.rejected))
        ch.confirms.confirming(ch)


def _tx_buffer(ch: ChannelSession, event: ContentReceived) -> None:
    session = ch.session
    session.hold_tx(ch.txn.hold_publish(event, session.broker.limits.max_tx_bytes))
    if session.broker.alarms and not session.blocked_sent:
        session.alarms_changed(session.broker.alarms)


def _immediate() -> ConnectionException:
    """basic.publish with immediate=true: RabbitMQ 3.x refuses it for the whole connection."""
    return ConnectionException(ReplyCode.NOT_IMPLEMENTED, "NOT_IMPLEMENTED - immediate=true", 60, 40)


def run_end(events: list[Event], first: ContentReceived, start: int, count: int) -> int:
    """Where the publishes from ``start`` (``first``) on stop going through one channel to one exchange and
    routing key without a headers table: what ``publish_run`` takes together."""
    if first.headers is not None:
        return start + 1
    channel = first.channel
    first_method = first.method
    exchange = first_method.exchange
    key = first_method.routing_key
    end = start + 1
    while end < count:
        event = events[end]
        if type(event) is not ContentReceived or event.channel != channel or event.headers is not None:
            break
        method = event.method  # the same object along a run the C scan cut (_wire.c)
        if method is not first_method and (method.exchange != exchange or method.routing_key != key):
            break
        end += 1
    return end
