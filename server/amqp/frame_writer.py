"""The outgoing side of one AMQP connection: encoded frames waiting for the socket, and heartbeats.

``FrameWriter`` is the base class of ``connection.AMQPConnection``, one object with it: the
connection owns all of this state (``connection.py``'s rules hold), and this module holds the code
that writes it. Outbound calls encode straight into ``_out`` (one list append per frame or
delivery, no copy) and ``data_to_send`` joins it once per writer wake-up; ``bytes_pending`` is what
the session's credit check reads. ``tick`` is the heartbeat clock: whether the peer was heard from
(``_received``, set by the inbound side) and whether we sent anything since the last tick. The
negotiated ``frame_max`` and ``heartbeat`` live here because the writer splits bodies by the one and
paces heartbeats by the other; the handshake (``connection.py``) sets them.
"""

from __future__ import annotations

from .codec import FRAME_HEADER, encode_content, encode_deliver, encode_method_frame
from .handshake import ConnectionState
from .method_codec import Method
from .spec import FRAME_END, FrameType

__all__ = ["FrameWriter"]

_HEARTBEAT_FRAME = FRAME_HEADER.pack(FrameType.HEARTBEAT, 0, 0) + bytes((FRAME_END,))


class FrameWriter:
    state: ConnectionState  # the connection's stage, set by ``AMQPConnection``

    def __init__(self, frame_max: int, heartbeat: int) -> None:
        self.frame_max = frame_max
        self.heartbeat = heartbeat
        self._out: list[bytes] = []
        self.bytes_pending = 0
        self._received = False
        self._sent = False
        self._last_seen: float | None = None

    def _queue(self, data: bytes) -> None:
        self._out.append(data)
        self.bytes_pending += len(data)

    def send_method(self, channel: int, method: Method) -> None:
        data = encode_method_frame(channel, method)
        self._out.append(data)
        self.bytes_pending += len(data)

    def send_content(self, channel: int, method: Method, props_raw: bytes, body: bytes) -> None:
        data = encode_method_frame(channel, method) + encode_content(channel, method.CLASS_ID, props_raw, body,
                                                                     self.frame_max)
        self._out.append(data)
        self.bytes_pending += len(data)

    def send_deliver(self, channel: int, consumer_tag: str, delivery_tag: int, redelivered: bool, exchange: str,
                     routing_key: str, props_raw: bytes, body: bytes) -> None:
        data = encode_deliver(channel, consumer_tag, delivery_tag, redelivered, exchange, routing_key, props_raw,
                              body, self.frame_max)
        self._out.append(data)
        self.bytes_pending += len(data)

    def send_heartbeat(self) -> None:
        self._queue(_HEARTBEAT_FRAME)

    def data_to_send(self) -> bytes:
        if not self._out:
            return b""
        data = self._out[0] if len(self._out) == 1 else b"".join(self._out)
        self._out = []
        self.bytes_pending = 0
        self._sent = True
        return data

    def unsent(self, data: bytes) -> None:
        """What the socket did not take of ``data_to_send``'s bytes: it goes out first next time."""
        self._out.insert(0, data)
        self.bytes_pending += len(data)

    # ------------------------------------------------------------------ heartbeats
    def tick(self, now: float) -> bool:
        """Heartbeat bookkeeping, called every heartbeat/2 seconds: False when the peer has been
        silent for more than two heartbeat intervals; queues a heartbeat if we sent nothing."""
        if self._received or self._last_seen is None:
            self._last_seen = now
            self._received = False
        if self.heartbeat and now - self._last_seen > 2 * self.heartbeat:
            return False
        if self.heartbeat and not self._sent and not self._out and self.state is ConnectionState.OPEN:
            self.send_heartbeat()
        self._sent = False
        return True

    def peer_alive(self) -> None:
        """Count the peer as heard from although nothing was read: while the broker itself stops
        reading (a blocked publisher), its heartbeats wait in the socket (RabbitMQ pauses the
        heartbeat monitor of blocked connections too)."""
        self._received = True
