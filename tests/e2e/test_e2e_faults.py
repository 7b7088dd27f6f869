"""Fault probes against real broker processes: malformed frames of each class answered by
RabbitMQ's connection.close code with the broker serving on."""

from __future__ import annotations

import socket
import struct

import pika
import pytest
from e2e_support import raw_open, recv_until_closed
from headrace.server.amqp import methods as m
from headrace.server.amqp.codec import encode_frame, encode_method_frame

pytestmark = pytest.mark.timeout(120)

PERSISTENT = pika.BasicProperties(delivery_mode=2)
OPEN = encode_method_frame(1, m.ChannelOpen())
PUBLISH = OPEN + encode_method_frame(1, m.BasicPublish(exchange="", routing_key="nowhere"))


def header(class_id: int = 60, size: int = 1, weight: int = 0, props: bytes = b"\x00\x00") -> bytes:
    return encode_frame(2, 1, struct.pack(">HHQ", class_id, weight, size) + props)


def close_reply(sock: socket.socket) -> tuple[int, str]:
    """The server's connection.close (reply code and text); answers close-ok and waits for the hang-up."""
    marker = b"\x00\x0a\x00\x32"
    sock.settimeout(10)
    data = b""
    while marker not in data or len(data) < data.find(marker) + 7 or \
            len(data) < data.find(marker) + 7 + data[data.find(marker) + 6]:
        chunk = sock.recv(65536)
        assert chunk, data
        data += chunk
    i = data.find(marker)
    code = struct.unpack_from(">H", data, i + 4)[0]
    text = data[i + 7:i + 7 + data[i + 6]].decode()
    sock.sendall(encode_method_frame(0, m.ConnectionCloseOk()))
    recv_until_closed(sock)
    return code, text


# one case per frame class, each answered as RabbitMQ 3.10's reader and command assembler answer it
MALFORMED = {
    # method frames
    "method-unknown": (encode_frame(1, 0, b"\x00\x0a\x00\x63"), 503),
    "method-truncated": (encode_frame(1, 0, b"\x00"), 501),
    "method-during-content": (PUBLISH + encode_method_frame(1, m.BasicQos(0, 1, False)), 505),
    # content header frames
    "header-without-method": (OPEN + header(), 505),
    "header-other-class": (PUBLISH + header(class_id=50), 505),
    "header-nonzero-weight": (PUBLISH + header(weight=1), 505),
    "header-truncated": (PUBLISH + encode_frame(2, 1, b"\x00\x3c\x00"), 501),
    "header-on-channel-0": (encode_frame(2, 0, struct.pack(">HHQ", 60, 0, 0) + b"\x00\x00"), 505),
    # content body frames
    "body-without-header": (PUBLISH + encode_frame(3, 1, b"x"), 505),
    "body-on-channel-0": (encode_frame(3, 0, b"x"), 505),
    # heartbeat frames
    "heartbeat-on-channel-1": (OPEN + encode_frame(8, 1, b""), 505),
    "heartbeat-with-payload": (encode_frame(8, 0, b"\x00\x00"), 501),
    # framing itself
    "unknown-frame-type": (encode_frame(4, 0, b""), 501),
    "bad-frame-end": (encode_frame(1, 1, b"\x00\x14\x00\x0a\x00")[:-1] + b"\x00", 501),
    "oversize": (struct.pack(">BHI", 3, 1, 131072) + b"\0" * 64, 501),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_frame_closes_its_connection_with_rabbitmqs_code_and_the_broker_serves_on(broker, case):
    frames, code = MALFORMED[case]
    bystander = pika.BlockingConnection(pika.URLParameters(broker.url))
    sock = raw_open(broker.amqp_port)
    sock.sendall(frames)
    got, text = close_reply(sock)
    assert (got, text.split(" - ")[0]) == (code, {501: "FRAME_ERROR", 503: "COMMAND_INVALID",
                                                   505: "UNEXPECTED_FRAME"}[code]), text
    ch = bystander.channel()  # the other connection, and new ones, are served
    q = ch.queue_declare("", exclusive=True).method.queue
    ch.basic_publish("", q, b"alive")
    assert ch.basic_get(q, auto_ack=True)[2] == b"alive"
    bystander.close()
    raw_open(broker.amqp_port).close()  # a new connection gets as far as open-ok

