"""The server side of one AMQP 0-9-1 connection, sans-IO (h2's shape).

Rule 1: ``AMQPConnection`` owns the wire state: handshake stage, negotiated limits, which channels
are open or being closed by us, which opens await the session's answer, content being assembled
per channel, and the outgoing bytes.
Rule 2: it knows nothing of brokers, time or sockets. ``receive_data`` parses every complete frame
in the buffer and returns events; it never raises on bad input but answers it the way the spec says
(channel.close or connection.close with a reply code) and reports that as an event. Outbound calls
append to a list that ``data_to_send`` joins once per writer wake-up: that outgoing side and the
heartbeat clock are ``FrameWriter`` (frame_writer.py), the base class of ``AMQPConnection``.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any

from . import methods as m
from .codec import FRAME_HEADER, decode_ack, decode_publish, encode_method_frame
from .content import PendingContent, parse_header
from .errors import AMQPError, ChannelException, ConnectionException
from .events import (
    BadProtocolHeader,
    ChannelClosed,
    ChannelOpenRequested,
    ConnectionClosed,
    ConnectionCloseOk,
    ContentReceived,
    MethodReceived,
)
from .frame_writer import FrameWriter
from .handshake import EXPECTED, NEXT, ConnectionState, check_mechanism, negotiate_tune
from .sasl import MECHANISMS
from .spec import FRAME_END, PROTOCOL_HEADER, FrameType, ReplyCode

__all__ = ["AMQPConnection", "ConnectionState"]

_unpack_frame = FRAME_HEADER.unpack_from
# plain ints for the per-frame comparisons (an enum member is a class attribute lookup each time)
_METHOD = int(FrameType.METHOD)
_HEADER = int(FrameType.HEADER)
_BODY = int(FrameType.BODY)
_HEARTBEAT = int(FrameType.HEARTBEAT)
_BASIC = m.BasicPublish.CLASS_ID
_PUBLISH = m.BasicPublish.METHOD_ID
_PUBLISH_IDS = struct.pack(">HH", _BASIC, _PUBLISH)
_ACK = m.BasicAck.METHOD_ID
_CLOSE = (m.ConnectionClose.CLASS_ID, m.ConnectionClose.METHOD_ID)
_CLOSE_OK = (m.ConnectionCloseOk.CLASS_ID, m.ConnectionCloseOk.METHOD_ID)
_CONNECTION_CLASS = m.ConnectionClose.CLASS_ID


class AMQPConnection(FrameWriter):
    """One connection's wire state (module docstring); its outgoing side is ``FrameWriter``."""

    def __init__(self, *, server_properties: Mapping[str, Any], channel_max: int = 2047,
                 frame_max: int = 131072, heartbeat: int = 60, max_message_size: int = 128 << 20,
                 mechanisms: tuple[str, ...] = MECHANISMS) -> None:
        super().__init__(frame_max, heartbeat)
        self.server_properties = dict(server_properties)
        self.channel_max = channel_max
        self.max_message_size = max_message_size
        self.mechanisms = mechanisms
        self.state = ConnectionState.AWAIT_HEADER
        self.client_properties: dict[str, Any] = {}
        self.vhost: str | None = None
        self.open_channels: set[int] = set()
        self.closing_channels: set[int] = set()  # we sent channel.close, waiting for close-ok
        # channel.open the session has not answered yet (ChannelOpenRequested): per request, in
        # order, the frames this codec queued on that channel meanwhile, to go out after open-ok
        self._opening: dict[int, list[list[bytes]]] = {}
        self._content: dict[int, PendingContent] = {}
        self._buf = bytearray()

    # ------------------------------------------------------------------ channels
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

    def _send_control(self, channel: int, method: Any) -> None:
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

    def close(self, exc: AMQPError | None = None, *, reply_code: int = 200, reply_text: str = "") -> None:
        if self.state in (ConnectionState.CLOSING, ConnectionState.CLOSED):
            return
        if exc is not None:
            reply_code, reply_text = exc.reply_code, exc.reply_text
            class_id, method_id = exc.class_id, exc.method_id
        else:
            class_id = method_id = 0
        if self.state is ConnectionState.AWAIT_HEADER:
            self.state = ConnectionState.CLOSED
            return
        self.send_method(0, m.ConnectionClose(reply_code, reply_text, class_id, method_id))
        self.state = ConnectionState.CLOSING
        self.open_channels.clear()
        self._content.clear()
        self._opening.clear()

    def is_channel_open(self, channel: int) -> bool:
        return channel in self.open_channels

    # ------------------------------------------------------------------ inbound
    def receive_data(self, data: bytes) -> list[Any]:
        events: list[Any] = []
        if not data or self.state is ConnectionState.CLOSED:
            return events
        self._received = True
        buf = self._buf
        limit = self.frame_max if self.frame_max else 1 << 31
        # Frames are cut from immutable bytes (one copy per payload): the read itself when nothing
        # was left over, else the leftover and the read joined, once the first frame is whole (a
        # large frame arriving over many reads is not copied again on each).
        src: bytes
        if buf or self.state is ConnectionState.AWAIT_HEADER:
            buf += data
            if self.state is ConnectionState.AWAIT_HEADER:
                if len(buf) < 8:
                    if not PROTOCOL_HEADER.startswith(bytes(buf)):
                        return self._bad_header(events)
                    return events
                if bytes(buf[:8]) != PROTOCOL_HEADER:
                    return self._bad_header(events)
                del buf[:8]
                self.send_method(0, m.ConnectionStart(0, 9, self.server_properties,
                                                      " ".join(self.mechanisms).encode(), b"en_US"))
                self.state = ConnectionState.AWAIT_START_OK
            if len(buf) < 7:
                return events
            size = _unpack_frame(buf, 0)[2]
            if size + 8 > len(buf):  # the first frame is not whole yet
                if size + 8 > limit:
                    self._fail(ConnectionException(
                        ReplyCode.FRAME_ERROR, f"FRAME_ERROR - frame size {size + 8} exceeds frame_max {limit}"), events)
                    buf.clear()
                return events
            src = bytes(buf)
            buf.clear()
        else:
            src = data if type(data) is bytes else bytes(data)
        pos = 0
        end = len(src)
        try:
            while end - pos >= 7:
                frame_type, channel, size = _unpack_frame(src, pos)
                if size + 8 > limit:
                    raise ConnectionException(ReplyCode.FRAME_ERROR,
                                              f"FRAME_ERROR - frame size {size + 8} exceeds frame_max {limit}")
                frame_end = pos + 7 + size
                if frame_end >= end:
                    break
                if src[frame_end] != FRAME_END:
                    raise ConnectionException(ReplyCode.FRAME_ERROR, "FRAME_ERROR - bad frame end marker")
                payload = src[pos + 7:frame_end]
                pos = frame_end + 1
                if self.state is ConnectionState.CLOSING:
                    if self._closing_frame(frame_type, channel, payload, events):
                        break
                    continue
                if frame_type == _METHOD:
                    if payload.startswith(_PUBLISH_IDS) and channel in self.open_channels \
                            and channel not in self._content:
                        after = self._whole_publish(src, pos, end, channel, payload, limit, events)
                        if after:
                            pos = after
                            continue
                    self._method_frame(channel, payload, events)
                elif frame_type == _BODY:
                    self._body_frame(channel, payload, events)
                elif frame_type == _HEADER:
                    self._header_frame(channel, payload, events)
                elif frame_type == _HEARTBEAT:
                    if channel != 0:
                        raise ConnectionException(ReplyCode.FRAME_ERROR,
                                                  "FRAME_ERROR - heartbeat frame on a non-zero channel")
                else:
                    raise ConnectionException(ReplyCode.FRAME_ERROR, f"FRAME_ERROR - unknown frame type {frame_type}")
                if self.state is ConnectionState.CLOSED:
                    break
        except ConnectionException as exc:
            self._fail(exc, events)
            buf.clear()
            return events
        if pos < end:  # the start of a frame still to come (buf is empty here)
            buf += memoryview(src)[pos:]
        return events

    def _bad_header(self, events: list[Any]) -> list[Any]:
        self._queue(PROTOCOL_HEADER)
        self.state = ConnectionState.CLOSED
        self._buf.clear()
        events.append(BadProtocolHeader())
        return events

    def _fail(self, exc: ConnectionException, events: list[Any]) -> None:
        if self.state in (ConnectionState.CLOSING, ConnectionState.CLOSED):
            return
        self.close(exc)
        events.append(ConnectionClosed(exc.reply_code, exc.reply_text, False))

    def _closing_frame(self, frame_type: int, channel: int, payload: bytes, events: list[Any]) -> bool:
        """After our connection.close only close/close-ok matter; True once one closed the connection."""
        if frame_type != _METHOD or channel != 0 or len(payload) < 4:
            return False
        ids = (payload[0] << 8 | payload[1], payload[2] << 8 | payload[3])
        if ids == _CLOSE_OK:
            self.state = ConnectionState.CLOSED
            events.append(ConnectionCloseOk())
            return True
        if ids == _CLOSE:
            self.send_method(0, m.ConnectionCloseOk())
            self.state = ConnectionState.CLOSED
            events.append(ConnectionCloseOk())
            return True
        return False

    def _whole_publish(self, src: bytes, pos: int, end: int, channel: int, payload: bytes, limit: int,
                       events: list[Any]) -> int:
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

    def _method_frame(self, channel: int, payload: bytes, events: list[Any]) -> None:
        if len(payload) < 4:
            raise ConnectionException(ReplyCode.FRAME_ERROR, "FRAME_ERROR - method frame too short")
        class_id = payload[0] << 8 | payload[1]
        method_id = payload[2] << 8 | payload[3]
        if channel:
            if channel in self._content:
                raise ConnectionException(ReplyCode.UNEXPECTED_FRAME,
                                          f"UNEXPECTED_FRAME - expected content header for class 60, got "
                                          f"method {class_id}.{method_id}", class_id, method_id)
            if channel in self.open_channels:
                try:
                    if class_id == _BASIC and method_id == _PUBLISH:
                        self._content[channel] = PendingContent(decode_publish(payload))
                        return
                    if class_id == _BASIC and method_id == _ACK:
                        events.append(MethodReceived(channel, decode_ack(payload)))
                        return
                except (IndexError, struct.error, UnicodeDecodeError):
                    raise ConnectionException(ReplyCode.SYNTAX_ERROR, "SYNTAX_ERROR - malformed method",
                                              class_id, method_id) from None
        method = m.decode_method(payload)
        if channel == 0:
            self._connection_method(method, events)
        else:
            self._channel_method(channel, method, events)

    def _connection_method(self, method: Any, events: list[Any]) -> None:
        kind = type(method)
        if kind is m.ConnectionClose:
            self.send_method(0, m.ConnectionCloseOk())
            self.state = ConnectionState.CLOSED
            events.append(ConnectionClosed(method.reply_code, method.reply_text, True))
            return
        expected = EXPECTED.get(self.state)
        if expected is not None:
            if kind is not expected:
                raise ConnectionException(ReplyCode.COMMAND_INVALID,
                                          f"COMMAND_INVALID - expected {expected.NAME}, got {method.NAME}",
                                          method.CLASS_ID, method.METHOD_ID)
            if kind is m.ConnectionStartOk:
                check_mechanism(self.mechanisms, method)
                self.client_properties = dict(method.client_properties)
            elif kind is m.ConnectionTuneOk:
                self.frame_max, self.channel_max, self.heartbeat = negotiate_tune(self.frame_max, self.channel_max,
                                                                                  method)
            else:
                self.vhost = method.virtual_host
            self.state = NEXT[self.state]
            events.append(MethodReceived(0, method))
            return
        if kind is m.ConnectionUpdateSecret and self.state is ConnectionState.OPEN:
            events.append(MethodReceived(0, method))
            return
        if kind in (m.ConnectionBlocked, m.ConnectionUnblocked):
            return  # a client telling us it is blocked: nothing to do
        raise ConnectionException(ReplyCode.COMMAND_INVALID, f"COMMAND_INVALID - unexpected {method.NAME}",
                                  method.CLASS_ID, method.METHOD_ID)

    def _channel_method(self, channel: int, method: Any, events: list[Any]) -> None:
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

    def _header_frame(self, channel: int, payload: bytes, events: list[Any]) -> None:
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

    def _body_frame(self, channel: int, payload: bytes, events: list[Any]) -> None:
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

