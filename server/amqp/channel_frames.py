"""One AMQP connection's channels on the wire: which are open, which we are closing, opens
waiting for the session, and the content (header and body frames) being assembled per channel.

Rule 1: a ``ChannelFrames`` (one per connection, made by ``connection.AMQPConnection``) owns that
state and the limits it enforces (``channel_max``: the server's offer until the handshake settles it,
``tuned``; ``max_message_size``). The connection's frame loop reads ``open_channels`` and
``content`` to pick its fast path and hands it the frames of channels 1 and up once the connection
is open; nothing else writes them. It writes its replies through the connection's ``FrameWriter``.
Rule 2: a read's run of whole publishes is taken by ``scan_publishes`` (C, ``_wire.c``) when it was
built (``compiled.py``), before the frame loop slices anything; ``whole_publish`` takes those it
leaves (a headers table, a second flag word) and every publish in pure-Python mode, with the same
checks and events; whatever neither takes goes frame by frame, which reports every fault.
Rule 3: the session answers a ``ChannelOpenRequested`` with ``accept_channel`` or a close; a frame
this side answers with on a channel whose open is unanswered waits behind the open-ok.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from . import methods as m
from .compiled import WIRE
from .codec import FRAME_HEADER, decode_ack, decode_publish, encode_method_frame
from .content import PendingContent, parse_header
from .errors import ChannelException, ConnectionException
from .events import ChannelClosed, ChannelOpenRequested, ContentReceived, Event, MethodReceived
from .frame_writer import FrameWriter
from .method_codec import not_utf8_method
from .spec import FRAME_END, FrameType, ReplyCode

__all__ = ["ChannelFrames", "scan_publishes"]

_BASIC = m.BasicPublish.CLASS_ID
_PUBLISH = m.BasicPublish.METHOD_ID
_ACK = m.BasicAck.METHOD_ID
_CONNECTION_CLASS = m.ConnectionClose.CLASS_ID
_unpack_frame = FRAME_HEADER.unpack_from
_HEADER = int(FrameType.HEADER)
_BODY = int(FrameType.BODY)

# (src, pos, end, frame limit, max message size, open channels, channels assembling, events) -> the
# position after the whole publishes taken from ``pos`` on (``pos``: none), their events appended
ScanPublishes = Callable[[bytes, int, int, int, int, set[int], dict[int, PendingContent], list[Event]], int]
scan_publishes: ScanPublishes | None = None
if WIRE is not None:
    WIRE.setup_scan(ContentReceived, m.BasicPublish)
    scan_publishes = WIRE.scan_publishes


class ChannelFrames:
    """The connection's channels and their content in assembly (module docstring)."""

    __slots__ = ("channel_max", "max_message_size", "open_channels", "closing_channels", "content", "_opening",
                 "_writer")

    def __init__(self, channel_max: int, max_message_size: int, writer: FrameWriter) -> None:
        self._writer = writer
        self.channel_max = channel_max
        self.max_message_size = max_message_size
        self.open_channels: set[int] = set()
        self.closing_channels: set[int] = set()  # we sent channel.close, waiting for close-ok
        # channel.open the session has not answered yet (ChannelOpenRequested): per request, in
        # order, the frames this codec queued on that channel meanwhile, to go out after open-ok
        self._opening: dict[int, list[list[bytes]]] = {}
        self.content: dict[int, PendingContent] = {}  # channel -> the publish being assembled

    def tuned(self, channel_max: int) -> None:
        """The channel limit the handshake settled on (connection.tune-ok)."""
        self.channel_max = channel_max

    def clear(self) -> None:
        """We sent connection.close: no channel is open any more and nothing is assembled."""
        self.open_channels.clear()
        self.content.clear()
        self._opening.clear()

    def accept_channel(self, channel: int) -> None:
        """The session's answer to its oldest ``ChannelOpenRequested`` on ``channel``: open-ok, then
        what this codec answered on the channel meanwhile (a pipelined channel.close's close-ok).
        A refusal is ``close``: the requests are dropped and no open-ok goes out (RabbitMQ's way)."""
        requests = self._opening.get(channel)
        if not requests:
            return
        held = requests.pop(0)
        if not requests:
            del self._opening[channel]
        self._writer.send_method(channel, m.ChannelOpenOk())
        for data in held:
            self._writer.queue(data)

    def _send_control(self, channel: int, method: m.Method) -> None:
        """A frame this codec answers with on a channel: held behind an unanswered channel.open."""
        requests = self._opening.get(channel)
        if requests:
            requests[-1].append(encode_method_frame(channel, method))
        else:
            self._writer.send_method(channel, method)

    def close_channel(self, channel: int, exc: ChannelException) -> None:
        if channel not in self.open_channels:
            return
        self.open_channels.discard(channel)
        self.content.pop(channel, None)
        self.closing_channels.add(channel)
        self._send_control(channel, m.ChannelClose(exc.reply_code, exc.reply_text, exc.class_id, exc.method_id))

    def is_channel_open(self, channel: int) -> bool:
        return channel in self.open_channels

    # ------------------------------------------------------------------ inbound
    def method_frame(self, channel: int, payload: bytes, class_id: int, method_id: int,
                     events: list[Event]) -> None:
        """A method frame on ``channel`` (1 and up) of an open connection; basic.publish and
        basic.ack on an open channel are decoded by their own fast decoders."""
        if channel in self.content:
            raise ConnectionException(ReplyCode.UNEXPECTED_FRAME,
                                      f"UNEXPECTED_FRAME - expected content header for class 60, got "
                                      f"method {class_id}.{method_id}", class_id, method_id)
        if channel in self.open_channels:
            try:
                if class_id == _BASIC and method_id == _PUBLISH:
                    self.content[channel] = PendingContent(decode_publish(payload))
                    return
                if class_id == _BASIC and method_id == _ACK:
                    events.append(MethodReceived(channel, decode_ack(payload)))
                    return
            except UnicodeDecodeError as exc:
                raise not_utf8_method("basic.publish", exc, class_id, method_id) from None
            except (IndexError, struct.error):
                raise ConnectionException(ReplyCode.SYNTAX_ERROR, "SYNTAX_ERROR - malformed method",
                                          class_id, method_id) from None
        self._channel_method(channel, m.decode_method(payload), events)

    def _channel_method(self, channel: int, method: Any, events: list[Event]) -> None:
        kind = type(method)
        if method.CLASS_ID == _CONNECTION_CLASS:
            raise ConnectionException(ReplyCode.COMMAND_INVALID,
                                      f"COMMAND_INVALID - {method.NAME} on channel {channel}",
                                      method.CLASS_ID, method.METHOD_ID)
        if channel in self.closing_channels:
            if kind is m.ChannelCloseOk:
                self.closing_channels.discard(channel)
            elif kind is m.ChannelClose:
                self._send_control(channel, m.ChannelCloseOk())
            return  # everything else on a channel we are closing is discarded (spec)
        if kind is m.ChannelOpen:
            if channel in self.open_channels:
                raise ConnectionException(ReplyCode.CHANNEL_ERROR, "CHANNEL_ERROR - second 'channel.open' seen",
                                          kind.CLASS_ID, kind.METHOD_ID)
            # As RabbitMQ: any id in 1..65535 is accepted; channel_max bounds how many are open at
            # once (530 with its text, failed method "none").
            if len(self.open_channels) >= self.channel_max:
                raise ConnectionException(ReplyCode.NOT_ALLOWED,
                                          f"NOT_ALLOWED - number of channels opened ({len(self.open_channels)}) has "
                                          f"reached the negotiated channel_max ({self.channel_max})")
            self.open_channels.add(channel)  # counted now: a pipelined channel.open is checked against it
            self._opening.setdefault(channel, []).append([])
            events.append(ChannelOpenRequested(channel))
            return
        if channel not in self.open_channels:
            raise ConnectionException(ReplyCode.CHANNEL_ERROR,
                                      f"CHANNEL_ERROR - expected 'channel.open' on channel {channel}",
                                      method.CLASS_ID, method.METHOD_ID)
        if kind is m.ChannelClose:
            self.open_channels.discard(channel)
            self.content.pop(channel, None)
            self._send_control(channel, m.ChannelCloseOk())
            events.append(ChannelClosed(channel, method.reply_code, method.reply_text, True))
            return
        if kind is m.ChannelCloseOk:
            raise ConnectionException(ReplyCode.CHANNEL_ERROR, "CHANNEL_ERROR - unexpected channel.close-ok",
                                      kind.CLASS_ID, kind.METHOD_ID)
        if method.HAS_CONTENT:
            if kind is not m.BasicPublish:
                raise ConnectionException(ReplyCode.COMMAND_INVALID,
                                          f"COMMAND_INVALID - {method.NAME} is sent by servers only",
                                          method.CLASS_ID, method.METHOD_ID)
            self.content[channel] = PendingContent(method)
            return
        events.append(MethodReceived(channel, method))

    def header_frame(self, channel: int, payload: bytes, events: list[Event]) -> None:
        content = self.content.get(channel)
        if content is None or content.size >= 0:
            if channel in self.closing_channels:
                return
            raise ConnectionException(ReplyCode.UNEXPECTED_FRAME,
                                      f"UNEXPECTED_FRAME - content header on channel {channel} without a method")
        size, props_raw, headers = parse_header(payload)
        if size > self.max_message_size:
            del self.content[channel]
            exc = ChannelException(ReplyCode.PRECONDITION_FAILED,
                                   f"PRECONDITION_FAILED - message size {size} is larger than configured max size "
                                   f"{self.max_message_size}", _BASIC, _PUBLISH)
            self.close_channel(channel, exc)
            events.append(ChannelClosed(channel, exc.reply_code, exc.reply_text, False))
            return
        content.props_raw = props_raw
        content.headers = headers
        content.size = size
        if size == 0:
            del self.content[channel]
            events.append(ContentReceived(channel, content.method, content.props_raw, b"", 0, headers))

    def body_frame(self, channel: int, payload: bytes, events: list[Event]) -> None:
        content = self.content.get(channel)
        if content is None or content.size < 0:
            if channel in self.closing_channels:
                return
            raise ConnectionException(ReplyCode.UNEXPECTED_FRAME,
                                      f"UNEXPECTED_FRAME - content body on channel {channel} without a header")
        content.parts.append(payload)
        content.received += len(payload)
        if content.received >= content.size:
            if content.received > content.size:
                raise ConnectionException(ReplyCode.FRAME_ERROR,
                                          "FRAME_ERROR - content body longer than announced in its header")
            del self.content[channel]
            parts = content.parts
            body = parts[0] if len(parts) == 1 else b"".join(parts)
            events.append(ContentReceived(channel, content.method, content.props_raw, body, content.size,
                                          content.headers))

    def whole_publish(self, src: bytes, pos: int, end: int, channel: int, payload: bytes, limit: int,
                      events: list[Event]) -> int:
        """A basic.publish (``payload``) whose content header and one body frame follow whole at
        ``pos``: its event at once, with no PendingContent and no trip round the frame loop for
        each frame. Returns where the next frame starts, or 0 to take the frames one by one, which
        is what happens to anything else (a body over several frames, an empty or oversized one, a
        frame not all here yet, and every fault, which the frame-by-frame path reports)."""
        if end - pos < 7:
            return 0
        h_type, h_channel, h_size = _unpack_frame(src, pos)
        h_end = pos + 7 + h_size
        if h_type != _HEADER or h_channel != channel or h_size + 8 > limit or h_end + 8 > end \
                or src[h_end] != FRAME_END:
            return 0
        b_start = h_end + 1
        b_type, b_channel, b_size = _unpack_frame(src, b_start)
        b_end: int = b_start + 7 + b_size
        if b_type != _BODY or b_channel != channel or b_size + 8 > limit or b_end >= end \
                or src[b_end] != FRAME_END:
            return 0
        try:
            method = decode_publish(payload)
            size, props_raw, headers = parse_header(src, pos + 7, h_end)
        except (IndexError, struct.error, UnicodeDecodeError, ConnectionException):
            return 0
        if size != b_size or not size or size > self.max_message_size:
            return 0
        events.append(ContentReceived(channel, method, props_raw, src[b_start + 7:b_end], size, headers))
        return b_end + 1
