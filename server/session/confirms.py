"""Publisher confirms and transactions: replies that wait for the message store's fsync.

Rule 1: ``ConfirmsAndTx`` owns the connection's channels with confirms outstanding, the count of
publishes still waiting for the store (``unconfirmed``, which pauses reading at its bound) and the
replies held until an fsync (tx.commit-ok, queue.purge-ok). Each channel owns its own confirm
sequence; this part only tells it what the store has synced.
Rule 2: while a confirm or a reply waits, this part asks the broker to be told of the next group
commit (``wait_for_sync``), and asks again while any still waits after it; the broker then calls
``store_synced`` (through the session). A ticket the store failed to write is answered with a
failure (nack, or a 541 channel close), never a confirm.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from headrace.server.amqp import methods as m
from headrace.server.amqp.errors import ChannelException
from headrace.server.amqp.spec import ReplyCode
from headrace.server.broker import errors

from . import publish
from .channel import ChannelSession
from .state import SessionState

__all__ = ["ConfirmsAndTx"]

# With no store every publish is "synced" at once: a ticket beyond any real one.
NO_STORE_SYNCED = 1 << 62


class ConfirmsAndTx:
    def __init__(self, session: SessionState, close_channel: Callable[[int, ChannelException], None],
                 wait_for_sync: Callable[[], None]) -> None:
        self.session = session
        self.close_channel = close_channel  # the session's: it owns the channels
        self.wait_for_sync = wait_for_sync  # the broker calls ``store_synced`` after its next sync
        self.channels: set[ChannelSession] = set()  # channels with confirms not yet sent
        self.unconfirmed = 0  # publishes waiting for the store before their confirm
        # (channel, store ticket, reply): tx.commit-ok and queue.purge-ok go out after their fsync
        self.pending: list[tuple[int, int, m.Method]] = []

    def connection_handlers(self) -> dict[type, Callable[[Any], None]]:
        return {}

    def channel_handlers(self) -> dict[type, Callable[[ChannelSession, Any], None]]:
        return {
            m.ConfirmSelect: self.confirm_select,
            m.TxSelect: self.tx_select,
            m.TxCommit: self.tx_commit,
            m.TxRollback: self.tx_rollback,
        }

    # ------------------------------------------------------------------ handlers
    def confirm_select(self, ch: ChannelSession, method: m.ConfirmSelect) -> None:
        if ch.tx:
            raise errors.precondition_failed("cannot switch from tx to confirm mode")
        ch.confirm = True
        if not method.nowait:
            self.session.conn.send_method(ch.id, m.ConfirmSelectOk())

    def tx_select(self, ch: ChannelSession, method: m.TxSelect) -> None:
        if ch.confirm:
            raise errors.precondition_failed("cannot switch from confirm to tx mode")
        ch.tx = True
        self.session.conn.send_method(ch.id, m.TxSelectOk())

    def tx_commit(self, ch: ChannelSession, method: m.TxCommit) -> None:
        if not ch.tx:
            raise errors.precondition_failed("channel is not transactional")
        before = ch.last_ticket
        publish.tx_commit(ch)
        if ch.last_ticket > before and self.session.broker.store_enabled:
            # the whole transaction is on disk with one group fsync before commit-ok goes out
            self.after_fsync(ch.id, ch.last_ticket, m.TxCommitOk())
        else:
            self.session.conn.send_method(ch.id, m.TxCommitOk())

    def tx_rollback(self, ch: ChannelSession, method: m.TxRollback) -> None:
        if not ch.tx:
            raise errors.precondition_failed("channel is not transactional")
        ch.tx_rollback()
        self.session.conn.send_method(ch.id, m.TxRollbackOk())

    # ------------------------------------------------------------------ waiting for the store
    def after_fsync(self, channel_id: int, ticket: int, reply: m.Method) -> None:
        """Send ``reply`` on the channel once the store has synced ``ticket``."""
        self.pending.append((channel_id, ticket, reply))
        self.wait_for_sync()

    def confirming(self, ch: ChannelSession) -> None:
        """``ch`` has a confirm waiting: it is released with the next sync (or at once)."""
        self.channels.add(ch)
        self.wait_for_sync()

    def channel_closed(self, ch: ChannelSession) -> None:
        self.channels.discard(ch)

    def store_synced(self, ticket: int) -> None:
        session = self.session
        if self.pending:
            failing = session.broker.failing
            waiting = []
            for channel_id, needed, reply in self.pending:
                if needed > ticket:
                    waiting.append((channel_id, needed, reply))
                elif not session.conn.is_channel_open(channel_id):
                    continue
                elif failing is not None and failing[0] < needed:
                    # the store could not write it: the change is not durable, say so (RabbitMQ
                    # closes the channel when its queue cannot take the write)
                    self.close_channel(channel_id, ChannelException(
                        ReplyCode.INTERNAL_ERROR, "INTERNAL_ERROR - the message store could not write to disk"))
                else:
                    session.conn.send_method(channel_id, reply)
            self.pending = waiting
            session.wake()
        if self.channels:
            self.release()
            session.wake()
        if self.pending or self.channels:
            self.wait_for_sync()  # later tickets than this sync

    def release(self) -> None:
        """Send every confirm the store has covered; count those still waiting."""
        broker = self.session.broker
        synced = broker.synced_ticket if broker.store_enabled else NO_STORE_SYNCED
        waiting = 0
        for channel in list(self.channels):
            left = channel.flush_confirms(synced)
            if not left:
                self.channels.discard(channel)
            waiting += left
        self.unconfirmed = waiting
