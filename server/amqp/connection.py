"""The server side of one AMQP 0-9-1 connection, sans-IO (h2's shape).

Rule 1: ``AMQPConnection`` owns the wire state: handshake stage, negotiated limits, which channels
are open or being closed by us, which opens await the session's answer, content being assembled
per channel, and the outgoing bytes.
Rule 2: it knows nothing of brokers, time or sockets. ``receive_data`` parses every complete frame
in the buffer and returns events; it never raises on bad input but answers it the way the spec says
(channel.close or connection.close with a reply code) and reports that as an event. Outbound calls
append to a list that ``data_to_send`` joins once per writer wake-up: that outgoing side and the
heartbeat clock are ``FrameWriter`` (frame_writer.py); channel opens and closes and the content
being assembled per channel are ``ChannelFrames`` (channel_frames.py). Both are base classes of
``AMQPConnection``, one object with it, so this rule covers their state too.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any

from . import methods as m
from .channel_frames import ChannelFrames
from .codec import FRAME_HEADER, decode_ack, decode_publish
from .content import PendingContent, parse_header
from .errors import AMQPError, ConnectionException
from .events import (
    BadProtocolHeader,
    ConnectionClosed,
    ConnectionCloseOk,
    ContentReceived,
    Event,
    MethodReceived,
)
from .handshake import EXPECTED, NEXT, ConnectionState, check_mechanism, negotiate_tune
from .method_codec import not_utf8_method
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


class AMQPConnection(ChannelFrames):
    """One connection's wire state (module docstring); its channels and content assembly are
    ``ChannelFrames``, its outgoing side ``FrameWriter``."""

    def __init__(self, *, server_properties: Mapping[str, Any], channel_max: int = 2047,
                 frame_max: int = 131072, heartbeat: int = 60, max_message_size: int = 128 << 20,
                 mechanisms: tuple[str, ...] = MECHANISMS) -> None:
        super().__init__(frame_max, heartbeat, channel_max, max_message_size)
        self.server_properties = dict(server_properties)
        self.mechanisms = mechanisms
        self.state = ConnectionState.AWAIT_HEADER
        self.client_properties: dict[str, Any] = {}
        self.vhost: str | None = None
        self._buf = bytearray()

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

    # ------------------------------------------------------------------ inbound
    def receive_data(self, data: bytes) -> list[Event]:
        events: list[Event] = []
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
                elif frame_type == _HEARTBEAT:  # as RabbitMQ: one with a payload is no heartbeat at all
                    if payload:
                        raise ConnectionException(ReplyCode.FRAME_ERROR, "FRAME_ERROR - heartbeat frame with a payload")
                    if channel != 0:
                        raise ConnectionException(ReplyCode.UNEXPECTED_FRAME,
                                                  "UNEXPECTED_FRAME - heartbeat frame on a non-zero channel")
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

    def _bad_header(self, events: list[Event]) -> list[Event]:
        self._queue(PROTOCOL_HEADER)
        self.state = ConnectionState.CLOSED
        self._buf.clear()
        events.append(BadProtocolHeader())
        return events

    def _fail(self, exc: ConnectionException, events: list[Event]) -> None:
        if self.state in (ConnectionState.CLOSING, ConnectionState.CLOSED):
            return
        self.close(exc)
        events.append(ConnectionClosed(exc.reply_code, exc.reply_text, False))

    def _closing_frame(self, frame_type: int, channel: int, payload: bytes, events: list[Event]) -> bool:
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

    def _method_frame(self, channel: int, payload: bytes, events: list[Event]) -> None:
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
                except UnicodeDecodeError as exc:
                    raise not_utf8_method("basic.publish", exc, class_id, method_id) from None
                except (IndexError, struct.error):
                    raise ConnectionException(ReplyCode.SYNTAX_ERROR, "SYNTAX_ERROR - malformed method",
                                              class_id, method_id) from None
        method = m.decode_method(payload)
        if channel == 0:
            self._connection_method(method, events)
        else:
            self._channel_method(channel, method, events)

    def _connection_method(self, method: Any, events: list[Event]) -> None:
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
