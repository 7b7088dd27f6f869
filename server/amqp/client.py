"""The client side of an AMQP 0-9-1 connection, sans-IO: what a shovel speaks to a broker.

Owner: the shovel task that made the ``ClientConnection`` (``server/net/shovel_link.py``) owns it
and everything in it: the bytes read and not yet parsed, the frames waiting for the socket, the
negotiated ``frame_max`` and heartbeat, and the half-read content of a delivery.

It reuses the server's codec (methods encode and decode the same way in both directions), so this
module only holds the client's half of the handshake (PLAIN, tune, open), frame parsing into
events, and the few calls a shovel makes. Calls never block or read the clock: the task feeds
bytes in (``receive_data``), sends what ``data_to_send`` returns, and calls ``tick(now)`` for
heartbeats.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from . import methods as m
from .codec import FRAME_HEADER, encode_content, encode_method_frame
from .errors import ConnectionException
from .spec import FRAME_END, PROTOCOL_HEADER, FrameType

__all__ = ["ChannelClosed", "ClientConnection", "Closed", "Confirm", "Delivery", "Ready", "Reply", "ClientEvent"]

_CONTENT_HEADER = struct.Struct(">HHQ")
_HEARTBEAT = FRAME_HEADER.pack(FrameType.HEARTBEAT, 0, 0) + bytes((FRAME_END,))


@dataclass(frozen=True, slots=True)
class Ready:
    """The connection is open and so is channel 1."""


@dataclass(frozen=True, slots=True)
class Reply:
    """A synchronous reply (declare-ok, consume-ok, select-ok ...) on ``channel``."""
    channel: int
    method: Any


@dataclass(frozen=True, slots=True)
class Delivery:
    delivery_tag: int
    redelivered: bool
    exchange: str
    routing_key: str
    props_raw: bytes
    body: bytes


@dataclass(frozen=True, slots=True)
class Confirm:
    """basic.ack / basic.nack from the broker for what we published under confirms."""
    delivery_tag: int
    multiple: bool
    ack: bool


@dataclass(frozen=True, slots=True)
class ChannelClosed:
    channel: int
    reply_code: int
    reply_text: str


@dataclass(frozen=True, slots=True)
class Closed:
    """The connection is over (the broker closed it, or it broke the protocol)."""
    reply_code: int
    reply_text: str


ClientEvent = Ready | Reply | Delivery | Confirm | ChannelClosed | Closed


class ClientConnection:
    def __init__(self, user: str, password: str, vhost: str, *, name: str, heartbeat: int = 10,
                 frame_max: int = 131072) -> None:
        self.user = user
        self.password = password
        self.vhost = vhost
        self.name = name  # connection_name in the client properties: what the peer's UI shows
        self.heartbeat = heartbeat
        self.frame_max = frame_max
        self.open = False
        self.closed = False
        self._in = bytearray()
        self._out: list[bytes] = [PROTOCOL_HEADER]
        self._content: tuple[Any, int, bytes, list[bytes], int] | None = None  # method, channel, props, body
        self._heard = True  # a frame came since the last tick
        self._sent = False  # a frame went since the last tick
        self._silent_ticks = 0

    # ------------------------------------------------------------------ outbound
    def send(self, method: Any, channel: int = 1) -> None:
        self._out.append(encode_method_frame(channel, method))

    def publish(self, exchange: str, routing_key: str, props_raw: bytes, body: bytes) -> None:
        method = m.BasicPublish(0, exchange, routing_key, False, False)
        self._out.append(encode_method_frame(1, method)
                         + encode_content(1, method.CLASS_ID, props_raw, body, self.frame_max))

    def close(self) -> None:
        if not self.closed:
            self.send(m.ConnectionClose(200, "shovel stopped", 0, 0), 0)
            self.closed = True

    def data_to_send(self) -> bytes:
        if not self._out:
            return b""
        data = b"".join(self._out)
        self._out = []
        self._sent = True
        return data

    def tick(self) -> bool:
        """Called every ``heartbeat / 2`` seconds once open: sends a heartbeat if nothing else
        went, and answers False when the peer was silent for two heartbeats (the link is dead)."""
        if not self._sent:
            self._out.append(_HEARTBEAT)
        self._sent = False
        self._silent_ticks = 0 if self._heard else self._silent_ticks + 1
        self._heard = False
        return self._silent_ticks < 4

    # ------------------------------------------------------------------ inbound
    def receive_data(self, data: bytes | bytearray) -> list[ClientEvent]:
        buf = self._in
        buf += data
        events: list[ClientEvent] = []
        pos = 0
        try:
            while len(buf) - pos >= 7:
                kind, channel, size = FRAME_HEADER.unpack_from(buf, pos)
                end = pos + 7 + size
                if len(buf) < end + 1:
                    break
                if buf[end] != FRAME_END:
                    raise ConnectionException(501, "FRAME_ERROR - bad frame end")
                payload = bytes(buf[pos + 7:end])
                pos = end + 1
                self._heard = True
                self._frame(kind, channel, payload, events)
        except ConnectionException as exc:
            self.closed = True
            events.append(Closed(exc.reply_code, exc.reply_text))
        del buf[:pos]
        return events

    def _frame(self, kind: int, channel: int, payload: bytes, events: list[ClientEvent]) -> None:
        if kind == FrameType.HEARTBEAT:
            return
        if kind == FrameType.METHOD:
            self._method(channel, m.decode_method(payload), events)
        elif kind == FrameType.HEADER and self._content is not None:
            method, ch, _, _, _ = self._content
            _, _, size = _CONTENT_HEADER.unpack_from(payload, 0)
            self._content = (method, ch, payload[12:], [], size)
            self._body_done(events)
        elif kind == FrameType.BODY and self._content is not None:
            method, ch, props, parts, size = self._content
            parts.append(payload)
            self._body_done(events)
        else:
            raise ConnectionException(505, f"UNEXPECTED_FRAME - frame type {kind}")

    def _body_done(self, events: list[ClientEvent]) -> None:
        assert self._content is not None
        method, _, props, parts, size = self._content
        if sum(map(len, parts)) < size:
            return
        self._content = None
        if type(method) is m.BasicDeliver:
            events.append(Delivery(method.delivery_tag, method.redelivered, method.exchange, method.routing_key,
                                   props, b"".join(parts)))
        # a basic.return (we never publish mandatory) or get-ok: nothing a shovel waits for

    def _method(self, channel: int, method: Any, events: list[ClientEvent]) -> None:
        kind = type(method)
        if method.HAS_CONTENT:
            self._content = (method, channel, b"", [], -1)
        elif kind is m.BasicAck or kind is m.BasicNack:
            events.append(Confirm(method.delivery_tag, method.multiple, kind is m.BasicAck))
        elif kind is m.ConnectionStart:
            response = b"\x00" + self.user.encode() + b"\x00" + self.password.encode()
            props = {"product": "headrace shovel", "connection_name": self.name,
                     "capabilities": {"publisher_confirms": True, "consumer_cancel_notify": True,
                                      "basic.nack": True, "connection.blocked": False}}
            self.send(m.ConnectionStartOk(props, "PLAIN", response, "en_US"), 0)
        elif kind is m.ConnectionTune:
            if method.frame_max:
                self.frame_max = min(self.frame_max, method.frame_max)
            both = (self.heartbeat, method.heartbeat)
            self.heartbeat = min(both) if all(both) else max(both)  # the smaller; one side's if the other has none
            self.send(m.ConnectionTuneOk(method.channel_max or 2047, self.frame_max, self.heartbeat), 0)
            self.send(m.ConnectionOpen(self.vhost, "", False), 0)
        elif kind is m.ConnectionOpenOk:
            self.send(m.ChannelOpen(""), 1)
        elif kind is m.ChannelOpenOk and channel == 1 and not self.open:
            self.open = True
            events.append(Ready())
        elif kind is m.ConnectionClose:
            self.send(m.ConnectionCloseOk(), 0)
            self.closed = True
            events.append(Closed(method.reply_code, method.reply_text))
        elif kind is m.ConnectionCloseOk:
            self.closed = True
            events.append(Closed(200, "closed"))
        elif kind is m.ChannelClose:
            self.send(m.ChannelCloseOk(), channel)
            events.append(ChannelClosed(channel, method.reply_code, method.reply_text))
        elif kind is m.BasicCancel:  # the queue went away under the consumer
            events.append(ChannelClosed(channel, 404, f"consumer cancelled by the broker: {method.consumer_tag}"))
        elif kind is m.ConnectionBlocked or kind is m.ConnectionUnblocked:
            return
        else:
            events.append(Reply(channel, method))
