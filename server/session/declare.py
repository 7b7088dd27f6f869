"""Declaring, binding, purging and deleting exchanges and queues over AMQP.

Rule 1: ``Declarations`` is the only writer of "the queue last declared" on the connection (the
spec's default for an empty queue name, ``SessionState.last_queue``); the vhost owns the exchanges,
queues and bindings these handlers change.
Rule 2: each handler checks the user's permission first (one ``Permissions.check``), then asks the
vhost, then replies; queue.purge-ok waits for the fsync of its purge record like a tx.commit-ok.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from headrace.exchanges import DestinationKind
from headrace.server.amqp import methods as m
from headrace.server.broker import errors
from headrace.server.broker.reply_to import REPLY_QUEUE

from .channel import ChannelSession
from .permissions import Permissions
from .state import SessionState

__all__ = ["Declarations"]

QUEUE = DestinationKind.QUEUE
EXCHANGE = DestinationKind.EXCHANGE


class Declarations:
    def __init__(self, session: SessionState, perms: Permissions,
                 after_fsync: Callable[[int, int, m.Method], None]) -> None:
        self.session = session
        self.perms = perms
        self.after_fsync = after_fsync  # ConfirmsAndTx's: send a reply once the store synced a ticket

    def connection_handlers(self) -> dict[type, Callable[[Any], None]]:
        return {}

    def channel_handlers(self) -> dict[type, Callable[[ChannelSession, Any], None]]:
        return {
            m.ExchangeDeclare: self.exchange_declare,
            m.ExchangeDelete: self.exchange_delete,
            m.ExchangeBind: self.exchange_bind,
            m.ExchangeUnbind: self.exchange_unbind,
            m.QueueDeclare: self.queue_declare,
            m.QueueBind: self.queue_bind,
            m.QueueUnbind: self.queue_unbind,
            m.QueuePurge: self.queue_purge,
            m.QueueDelete: self.queue_delete,
        }

    def _reply(self, ch: ChannelSession, method: m.Method, reply: m.Method) -> None:
        if not getattr(method, "nowait", False):
            self.session.conn.send_method(ch.id, reply)

    # ------------------------------------------------------------------ exchanges
    def exchange_declare(self, ch: ChannelSession, method: m.ExchangeDeclare) -> None:
        s = self.session
        if not method.passive:
            self.perms.check("configure", method.exchange, "exchange")
        s.vhost.declare_exchange(method.exchange, method.type, passive=method.passive, durable=method.durable,
                                 auto_delete=method.auto_delete, internal=method.internal,
                                 arguments=method.arguments)
        self._reply(ch, method, m.ExchangeDeclareOk())

    def exchange_delete(self, ch: ChannelSession, method: m.ExchangeDelete) -> None:
        s = self.session
        self.perms.check("configure", method.exchange, "exchange")
        s.vhost.delete_exchange(method.exchange, if_unused=method.if_unused)
        self._reply(ch, method, m.ExchangeDeleteOk())

    def exchange_bind(self, ch: ChannelSession, method: m.ExchangeBind) -> None:
        s = self.session
        self.perms.check("write", method.destination, "exchange")
        self.perms.check("read", method.source, "exchange")
        s.vhost.bind(method.source, method.destination, EXCHANGE, method.routing_key, method.arguments)
        self._reply(ch, method, m.ExchangeBindOk())

    def exchange_unbind(self, ch: ChannelSession, method: m.ExchangeUnbind) -> None:
        s = self.session
        self.perms.check("write", method.destination, "exchange")
        self.perms.check("read", method.source, "exchange")
        s.vhost.unbind(method.source, method.destination, EXCHANGE, method.routing_key, method.arguments)
        self._reply(ch, method, m.ExchangeUnbindOk())

    # ------------------------------------------------------------------ queues
    def queue_declare(self, ch: ChannelSession, method: m.QueueDeclare) -> None:
        s = self.session
        if method.queue.startswith(REPLY_QUEUE):  # RabbitMQ answers for the pseudo-queue itself
            if not s.broker.replies.exists(method.queue):
                raise errors.not_found("queue", method.queue, s.vhost.name)
            self._reply(ch, method, m.QueueDeclareOk(queue=method.queue, message_count=0, consumer_count=1))
            return
        if not method.passive and method.queue:
            if method.queue.startswith("amq."):
                # RabbitMQ's check_name refuses every active declare of a reserved name, even of a
                # queue that exists (a server-named amq.gen-... one redeclared by its name)
                raise errors.access_refused(f"queue name '{method.queue}' contains reserved prefix 'amq.*'")
            self.perms.check("configure", method.queue, "queue")
        queue = s.vhost.declare_queue(
            method.queue, owner=s, now=s.now, passive=method.passive, durable=method.durable,
            exclusive=method.exclusive, auto_delete=method.auto_delete, arguments=method.arguments)
        s.last_queue = queue.name
        self._reply(ch, method, m.QueueDeclareOk(queue=queue.name, message_count=queue.messages_ready,
                                                 consumer_count=queue.consumer_count))

    def queue_bind(self, ch: ChannelSession, method: m.QueueBind) -> None:
        s = self.session
        queue = method.queue or s.last_queue
        self.perms.check("write", queue, "queue")
        self.perms.check("read", method.exchange, "exchange")
        s.vhost.check_exclusive(s.vhost.get_queue(queue), s)
        s.vhost.bind(method.exchange, queue, QUEUE, method.routing_key, method.arguments)
        self._reply(ch, method, m.QueueBindOk())

    def queue_unbind(self, ch: ChannelSession, method: m.QueueUnbind) -> None:
        s = self.session
        queue = method.queue or s.last_queue
        self.perms.check("write", queue, "queue")
        self.perms.check("read", method.exchange, "exchange")
        existing = s.vhost.queues.get(queue)
        if existing is not None:  # a queue already gone is unbind-ok (see VHost.unbind)
            s.vhost.check_exclusive(existing, s)  # as for bind: 405 for others
        s.vhost.unbind(method.exchange, queue, QUEUE, method.routing_key, method.arguments)
        s.conn.send_method(ch.id, m.QueueUnbindOk())

    def queue_purge(self, ch: ChannelSession, method: m.QueuePurge) -> None:
        s = self.session
        queue = method.queue or s.last_queue
        self.perms.check("read", queue, "queue")
        before = s.broker.store_ticket
        count = s.vhost.purge_queue(queue, s)
        if method.nowait:
            return
        reply = m.QueuePurgeOk(message_count=count)
        if s.broker.store_ticket > before:
            # purge-ok only once the purge record is fsynced: a crash must not bring them back
            self.after_fsync(ch.id, s.broker.store_ticket, reply)
        else:
            s.conn.send_method(ch.id, reply)

    def queue_delete(self, ch: ChannelSession, method: m.QueueDelete) -> None:
        s = self.session
        queue = method.queue or s.last_queue
        self.perms.check("configure", queue, "queue")
        count = s.vhost.delete_queue(queue, owner=s, if_unused=method.if_unused, if_empty=method.if_empty)
        self._reply(ch, method, m.QueueDeleteOk(message_count=count))
