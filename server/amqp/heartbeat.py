"""The heartbeat clock of one AMQP connection.

Rule 1: a ``HeartbeatClock`` (one per connection, made by ``connection.AMQPConnection``) owns the
negotiated interval (``interval``: the server's offer until the handshake settles it, ``tuned``),
whether the peer was heard from since the last tick (``_heard``: the frame loop calls
``peer_alive`` once per read) and when it last was (``_last_seen``).
Rule 2: ``tick`` runs every interval/2 seconds (the shell's timer, given ``now``): it says whether
the peer is still alive and asks the connection's ``FrameWriter`` for a heartbeat when we sent
nothing since the last tick; the writer, not this clock, knows what went out (``quiet``).
"""

from __future__ import annotations

from .frame_writer import FrameWriter

__all__ = ["HeartbeatClock"]


class HeartbeatClock:
    """The connection's heartbeat bookkeeping (module docstring)."""

    __slots__ = ("interval", "_heard", "_last_seen", "_writer")

    def __init__(self, interval: int, writer: FrameWriter) -> None:
        self.interval = interval
        self._writer = writer
        self._heard = False
        self._last_seen: float | None = None

    def tuned(self, interval: int) -> None:
        """The interval the handshake settled on (connection.tune-ok); 0 turns heartbeats off."""
        self.interval = interval

    def peer_alive(self) -> None:
        """The peer was heard from: bytes arrived, or the broker counts it as heard although
        nothing was read (while it stops reading a blocked publisher, the peer's heartbeats wait
        in the socket; RabbitMQ pauses the heartbeat monitor of blocked connections too)."""
        self._heard = True

    def tick(self, now: float, is_open: bool) -> bool:
        """Heartbeat bookkeeping, called every interval/2 seconds: False when the peer has been
        silent for more than two intervals; queues a heartbeat on an open connection if we sent
        nothing since the last tick."""
        if self._heard or self._last_seen is None:
            self._last_seen = now
            self._heard = False
        interval = self.interval
        if interval and now - self._last_seen > 2 * interval:
            return False
        quiet = self._writer.quiet()
        if interval and quiet and is_open:
            self._writer.send_heartbeat()
        return True
