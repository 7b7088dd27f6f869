"""Bytes a client sends and a reader of what the server sends, for the sans-IO protocol tests."""

from __future__ import annotations

import struct
from typing import Any

from headrace.server.amqp import methods as m
from headrace.server.amqp.codec import encode_frame, encode_method_frame
from headrace.server.amqp.connection import AMQPConnection
from headrace.server.amqp.events import ChannelOpenRequested
from headrace.server.amqp.properties import BasicProperties, encode_properties

HEADER = b"AMQP\x00\x00\x09\x01"
HEARTBEAT = b"\x08\x00\x00\x00\x00\x00\x00\xce"


def new_conn(**kw: Any) -> AMQPConnection:
    return AMQPConnection(server_properties={"product": "test"}, **kw)


def open_bytes(heartbeat: int = 0, channel_max: int = 100, frame_max: int = 65536) -> bytes:
    """Protocol header, start-ok, tune-ok, connection.open."""
    return HEADER + b"".join((
        encode_method_frame(0, m.ConnectionStartOk({}, "PLAIN", b"\x00u\x00p", "en_US")),
        encode_method_frame(0, m.ConnectionTuneOk(channel_max, frame_max, heartbeat)),
        encode_method_frame(0, m.ConnectionOpen("/")),
    ))


def handshake_bytes(heartbeat: int = 0) -> bytes:
    """Connection opened and channel 1 open."""
    return open_bytes(heartbeat) + encode_method_frame(1, m.ChannelOpen())


def publish_bytes(body: bytes, channel: int = 1) -> bytes:
    props = encode_properties(BasicProperties(delivery_mode=2))
    header = struct.pack(">HHQ", 60, 0, len(body)) + props
    out = encode_method_frame(channel, m.BasicPublish(exchange="x", routing_key="k")) + encode_frame(2, channel, header)
    for i in range(0, len(body), 1000):
        out += encode_frame(3, channel, body[i:i + 1000])
    return out


def publish_with_properties(props_raw: bytes, channel: int = 1) -> bytes:
    header = struct.pack(">HHQ", 60, 0, 1) + props_raw
    return (encode_method_frame(channel, m.BasicPublish(exchange="x", routing_key="k"))
            + encode_frame(2, channel, header) + encode_frame(3, channel, b"z"))


def accept_opens(conn: AMQPConnection, events: list[Any]) -> list[Any]:
    """Answer every channel.open in ``events`` with open-ok, as the session does once its checks pass."""
    for event in events:
        if isinstance(event, ChannelOpenRequested):
            conn.accept_channel(event.channel)
    return events


def feed(conn: AMQPConnection, data: bytes, mode: str) -> list[Any]:
    """``whole``: one call; ``bytewise``: one byte per call; ``split``: two uneven pieces."""
    events: list[Any] = []
    if mode == "whole":
        events += conn.receive_data(data)
    elif mode == "bytewise":
        for i in range(len(data)):
            events += conn.receive_data(data[i:i + 1])
    else:
        events += conn.receive_data(data[:len(data) // 3])
        events += conn.receive_data(data[len(data) // 3:])
    return events


def frames_of(data: bytes) -> list[tuple[int, int, bytes]]:
    """(type, channel, payload) of every frame in ``data``, which must be whole, well-formed frames."""
    frames = []
    pos = 0
    while pos < len(data):
        ftype, channel, size = struct.unpack_from(">BHI", data, pos)
        assert ftype in (1, 2, 3, 8), ftype
        assert data[pos + 7 + size] == 0xCE
        frames.append((ftype, channel, data[pos + 7:pos + 7 + size]))
        pos += 8 + size
    assert pos == len(data)
    return frames


def sent_methods(conn: AMQPConnection) -> list[tuple[int, Any]]:
    """(channel, method) of each method frame the connection has queued to send."""
    return [(channel, m.decode_method(payload)) for ftype, channel, payload in frames_of(conn.data_to_send())
            if ftype == 1]


def last_method_payload(data: bytes) -> bytes:
    """Payload of the last frame in ``data`` (a method frame)."""
    return frames_of(data)[-1][2]
