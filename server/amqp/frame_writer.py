"""The outgoing side of one AMQP connection: encoded frames waiting for the socket.

Rule 1: a ``FrameWriter`` (one per connection, made by ``connection.AMQPConnection``) owns the
frames not yet taken by the socket (``_out``), their size (``bytes_pending``, which the session's
credit check reads), whether anything went out since the heartbeat clock last asked (``_sent``),
and the frame size it splits bodies by (``frame_max``: the server's offer until the handshake
settles it, ``tuned``).
Rule 2: outbound calls encode straight into ``_out`` (one list append per frame or delivery, no
copy) and ``data_to_send`` joins it once per writer wake-up. The connection hands the send calls
out as its own (bound once, so a delivery costs no extra call), and the channels' side
(``channel_frames.py``) and the heartbeat clock (``heartbeat.py``) write through these methods.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .codec import FRAME_HEADER, encode_content, encode_deliver, encode_delivers, encode_method_frame
from .method_codec import Method
from .spec import FRAME_END, FrameType

__all__ = ["FrameWriter"]

_HEARTBEAT_FRAME = FRAME_HEADER.pack(FrameType.HEARTBEAT, 0, 0) + bytes((FRAME_END,))


class FrameWriter:
    """The connection's outgoing frames (module docstring)."""

    __slots__ = ("frame_max", "_out", "bytes_pending", "_sent")

    def __init__(self, frame_max: int) -> None:
        self.frame_max = frame_max
        self._out: list[bytes] = []
        self.bytes_pending = 0
        self._sent = False

    def tuned(self, frame_max: int) -> None:
        """The frame size the handshake settled on (connection.tune-ok)."""
        self.frame_max = frame_max

    def queue(self, data: bytes) -> None:
        """Frames encoded elsewhere (held behind a channel.open, a protocol header)."""
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

    def send_delivers(self, channel: int, consumer_tag: str, first_tag: int, entries: Sequence[Any]) -> None:
        """``send_deliver`` of a consumer's turn of queue entries (``QueueEntry``: its
        ``redelivered`` and its message's exchange, routing key, properties and body), tagged from
        ``first_tag`` on, in one encoding call."""
        data = encode_delivers(channel, consumer_tag, first_tag, entries, self.frame_max)
        self._out.append(data)
        self.bytes_pending += len(data)

    def send_heartbeat(self) -> None:
        self.queue(_HEARTBEAT_FRAME)

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

    def quiet(self) -> bool:
        """For the heartbeat clock, once per tick: True when nothing went out since the last call
        and nothing is waiting (a heartbeat is due); starts the next interval."""
        quiet = not self._sent and not self._out
        self._sent = False
        return quiet
