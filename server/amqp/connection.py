"""The server side of one AMQP 0-9-1 connection, sans-IO (h2's shape).

Rule 1: ``AMQPConnection`` owns the connection's own wire state: the handshake stage, the server's
and client's properties, the vhost asked for, and the bytes of a frame not all read yet. It makes
three collaborators, each owning its part: ``FrameWriter`` (frame_writer.py: the outgoing frames
and the frame size bodies are split by), ``ChannelFrames`` (channel_frames.py: which channels are
open or being closed by us, opens awaiting the session's answer, content being assembled, the
channel and message size limits) and ``HeartbeatClock`` (heartbeat.py: the interval and whether
the peer was heard from). The handshake settles the limits and tells each its own (``tuned``).
Rule 2: it knows nothing of brokers, time or sockets. ``receive_data`` parses every complete frame
in the buffer and returns events; it never raises on bad input but answers it the way the spec says
(channel.close or connection.close with a reply code) and reports that as an event. Outbound calls
append to the writer's list, which ``data_to_send`` joins once per writer wake-up. The
collaborators' calls the session and the shell make are handed out as this object's, bound once
in ``__init__`` (no extra call on the way of a message).
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any

from . import methods as m
from .channel_frames import ChannelFrames, scan_publishes
from .codec import FRAME_HEADER
from .errors import AMQPError, ConnectionException
from .events import (
    BadProtocolHeader,
    ConnectionClosed,
    ConnectionCloseOk,
    Event,
    MethodReceived,
)
from .handshake import EXPECTED, NEXT, ConnectionState, check_mechanism, negotiate_tune
from .frame_writer import FrameWriter
from .heartbeat import HeartbeatClock
from .sasl import MECHANISMS
from .spec import FRAME_END, PROTOCOL_HEADER, FrameType, ReplyCode

__all__ = ["AMQPConnection", "ConnectionState"]

_unpack_frame = FRAME_HEADER.unpack_from
# plain ints for the per-frame comparisons (an enum member is a class attribute lookup each time)
_METHOD = int(FrameType.METHOD)
_HEADER = int(FrameType.HEADER)
_BODY = int(FrameType.BODY)
_HEARTBEAT = int(FrameType.HEARTBEAT)
_PUBLISH_IDS = struct.pack(">HH", m.BasicPublish.CLASS_ID, m.BasicPublish.METHOD_ID)
_CLOSE = (m.ConnectionClose.CLASS_ID, m.ConnectionClose.METHOD_ID)
_CLOSE_OK = (m.ConnectionCloseOk.CLASS_ID, m.ConnectionCloseOk.METHOD_ID)


class AMQPConnection:
    """One connection's wire state (module docstring): the handshake and the frame loop; its
    outgoing side is ``writer``, its channels ``channels``, its heartbeats ``clock``."""

    def __init__(self, *, server_properties: Mapping[str, Any], channel_max: int = 2047,
                 frame_max: int = 131072, heartbeat: int = 60, max_message_size: int = 128 << 20,
                 mechanisms: tuple[str, ...] = MECHANISMS) -> None:
        self.writer = writer = FrameWriter(frame_max)
        self.channels = channels = ChannelFrames(channel_max, max_message_size, writer)
        self.clock = clock = HeartbeatClock(heartbeat, writer)
        # the collaborators' calls, handed out as this connection's (bound once: no extra call per use)
        self.send_method = writer.send_method
        self.send_content = writer.send_content
        self.send_deliver = writer.send_deliver
        self.data_to_send = writer.data_to_send
        self.unsent = writer.unsent
        self.accept_channel = channels.accept_channel
        self.close_channel = channels.close_channel
        self.is_channel_open = channels.is_channel_open
        self.peer_alive = clock.peer_alive
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
        self.channels.clear()

    # ------------------------------------------------------------------ what the shell and session read
    @property
    def bytes_pending(self) -> int:
        """Bytes waiting for the socket (the writer's)."""
        return self.writer.bytes_pending

    @property
    def frame_max(self) -> int:
        return self.writer.frame_max

    @property
    def channel_max(self) -> int:
        return self.channels.channel_max

    @property
    def heartbeat(self) -> int:
        return self.clock.interval

    def tick(self, now: float) -> bool:
        """The heartbeat clock's tick (heartbeat.py): False once the peer is silent too long."""
        return self.clock.tick(now, self.state is ConnectionState.OPEN)

    # ------------------------------------------------------------------ inbound
    def receive_data(self, data: bytes) -> list[Event]:
        events: list[Event] = []
        if not data or self.state is ConnectionState.CLOSED:
            return events
        self.clock.peer_alive()
        buf = self._buf
        frame_max = self.writer.frame_max
        limit = frame_max if frame_max else 1 << 31
        channels = self.channels
        open_channels = channels.open_channels  # read, never written, here: the fast path's test
        assembling = channels.content
        max_size = channels.max_message_size
        scan = scan_publishes
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
                if scan is not None and frame_type == _METHOD and src.startswith(_PUBLISH_IDS, pos + 7) \
                        and self.state is ConnectionState.OPEN:
                    after = scan(src, pos, end, limit, max_size, open_channels, assembling, events)
                    if after != pos:  # the run of whole publishes from here on, taken in C
                        pos = after
                        continue
                payload = src[pos + 7:frame_end]
                pos = frame_end + 1
                if self.state is ConnectionState.CLOSING:
                    if self._closing_frame(frame_type, channel, payload, events):
                        break
                    continue
                if frame_type == _METHOD:
                    if payload.startswith(_PUBLISH_IDS) and channel in open_channels \
                            and channel not in assembling:
                        after = channels.whole_publish(src, pos, end, channel, payload, limit, events)
                        if after:
                            pos = after
                            continue
                    self._method_frame(channel, payload, events)
                elif frame_type == _BODY:
                    channels.body_frame(channel, payload, events)
                elif frame_type == _HEADER:
                    channels.header_frame(channel, payload, events)
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
        self.writer.queue(PROTOCOL_HEADER)
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

    def _method_frame(self, channel: int, payload: bytes, events: list[Event]) -> None:
        if len(payload) < 4:
            raise ConnectionException(ReplyCode.FRAME_ERROR, "FRAME_ERROR - method frame too short")
        class_id = payload[0] << 8 | payload[1]
        method_id = payload[2] << 8 | payload[3]
        if channel:
            if self.state is not ConnectionState.OPEN:
                method = m.decode_method(payload)
                raise ConnectionException(ReplyCode.CHANNEL_ERROR, "CHANNEL_ERROR - connection is not open yet",
                                          method.CLASS_ID, method.METHOD_ID)
            self.channels.method_frame(channel, payload, class_id, method_id, events)
            return
        self._connection_method(m.decode_method(payload), events)

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
                frame_max, channel_max, heartbeat = negotiate_tune(self.frame_max, self.channel_max, method)
                self.writer.tuned(frame_max)
                self.channels.tuned(channel_max)
                self.clock.tuned(heartbeat)
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
