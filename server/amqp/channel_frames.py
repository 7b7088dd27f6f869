"""One AMQP connection's channels on the wire: opens waiting for the session, channels we are
closing, and the content (header and body frames) being assembled per channel.

``ChannelFrames`` is a base class of ``connection.AMQPConnection``, one object with it: the
connection owns all of this state (``connection.py``'s rules hold), and this module holds the code
for the frames of channels 1 and up once the frame loop (``AMQPConnection.receive_data``) has cut
them. The session answers a ``ChannelOpenRequested`` with ``accept_channel`` or a close.
"""

from __future__ import annotations

from typing import Any

from . import methods as m
from .codec import encode_method_frame
from .content import PendingContent, parse_header
from .errors import ChannelException, ConnectionException
from .events import ChannelClosed, ChannelOpenRequested, ContentReceived, Event, MethodReceived
from .frame_writer import FrameWriter
from .handshake import ConnectionState
from .spec import ReplyCode

__all__ = ["ChannelFrames"]

_BASIC = m.BasicPublish.CLASS_ID
_PUBLISH = m.BasicPublish.METHOD_ID
_CONNECTION_CLASS = m.ConnectionClose.CLASS_ID


class ChannelFrames(FrameWriter):
    def __init__(self, frame_max: int, heartbeat: int, channel_max: int, max_message_size: int) -> None:
        super().__init__(frame_max, heartbeat)
        self.channel_max = channel_max
        self.max_message_size = max_message_size
        self.open_channels: set[int] = set()
        self.closing_channels: set[int] = set()  # we sent channel.close, waiting for close-ok
        # channel.open the session has not answered yet (ChannelOpenRequested): per request, in
        # order, the frames this codec queued on that channel meanwhile, to go out after open-ok
        self._opening: dict[int, list[list[bytes]]] = {}
        self._content: dict[int, PendingContent] = {}

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
        self.send_method(channel, m.ChannelOpenOk())
        for data in held:
            self._queue(data)

    def _send_control(self, channel: int, method: m.Method) -> None:
        """A frame this codec answers with on a channel: held behind an unanswered channel.open."""
        requests = self._opening.get(channel)
        if requests:
            requests[-1].append(encode_method_frame(channel, method))
        else:
            self.send_method(channel, method)

    def close_channel(self, channel: int, exc: ChannelException) -> None:
        if channel not in self.open_channels:
            return
        self.open_channels.discard(channel)
        self._content.pop(channel, None)
        self.closing_channels.add(channel)
        self._send_control(channel, m.ChannelClose(exc.reply_code, exc.reply_text, exc.class_id, exc.method_id))

    def is_channel_open(self, channel: int) -> bool:
        return channel in self.open_channels

    # ------------------------------------------------------------------ inbound
    def _channel_method(self, channel: int, method: Any, events: list[Event]) -> None:
        if self.state is not ConnectionState.OPEN:
            raise ConnectionException(ReplyCode.CHANNEL_ERROR, "CHANNEL_ERROR - connection is not open yet",
                                      method.CLASS_ID, method.METHOD_ID)
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
            self._content.pop(channel, None)
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
            self._content[channel] = PendingContent(method)
            return
        events.append(MethodReceived(channel, method))

    def _header_frame(self, channel: int, payload: bytes, events: list[Event]) -> None:
        content = self._content.get(channel)
        if content is None or content.size >= 0:
            if channel in self.closing_channels:
                return
            raise ConnectionException(ReplyCode.UNEXPECTED_FRAME,
                                      f"UNEXPECTED_FRAME - content header on channel {channel} without a method")
        size, props_raw, headers = parse_header(payload)
        if size > self.max_message_size:
            del self._content[channel]
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
            del self._content[channel]
            events.append(ContentReceived(channel, content.method, content.props_raw, b"", 0, headers))

    def _body_frame(self, channel: int, payload: bytes, events: list[Event]) -> None:
        content = self._content.get(channel)
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
            del self._content[channel]
            parts = content.parts
            body = parts[0] if len(parts) == 1 else b"".join(parts)
            events.append(ContentReceived(channel, content.method, content.props_raw, body, content.size,
                                          content.headers))

