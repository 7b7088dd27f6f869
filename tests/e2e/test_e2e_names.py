"""Names are one rule over AMQP and HTTP (``server/amqp/names.py``): at most 255 bytes of valid
UTF-8, and never ``.`` or ``..`` where the name is a URL path segment. Bytes that are not UTF-8 are
refused, never read with U+FFFD, so two names that differ in their bytes are never one object."""

from __future__ import annotations

import socket
import struct

import pytest
from e2e_support import raw_open, recv_until_closed, unique
from headrace.server.amqp import methods as m
from headrace.server.amqp.codec import encode_frame, encode_method_frame

pytestmark = pytest.mark.timeout(60)


def close_of(sock: socket.socket) -> tuple[int, str]:
    """(reply code, reply text) of the server's connection.close; answers close-ok, waits for the end."""
    marker = b"\x00\x0a\x00\x32"
    sock.settimeout(10)
    data = b""
    while marker not in data or len(data) < data.find(marker) + 7 or \
            len(data) < data.find(marker) + 7 + data[data.find(marker) + 6]:
        chunk = sock.recv(65536)
        assert chunk, data
        data += chunk
    i = data.find(marker)
    code, size = struct.unpack_from(">HB", data, i + 4)
    sock.sendall(encode_method_frame(0, m.ConnectionCloseOk()))
    recv_until_closed(sock)
    return code, data[i + 7:i + 7 + size].decode()


def amqplain_open(port: int, login: bytes, password: bytes) -> socket.socket:
    """A hand-driven AMQPLAIN login (the mechanism whose LOGIN is a field-table long string, so it
    may hold any bytes); returns the socket after start-ok."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(b"AMQP\x00\x00\x09\x01")
    sock.recv(65536)  # connection.start
    response = b"".join(bytes((len(key),)) + key + b"S" + struct.pack(">I", len(value)) + value
                        for key, value in ((b"LOGIN", login), (b"PASSWORD", password)))
    sock.sendall(encode_method_frame(0, m.ConnectionStartOk({}, "AMQPLAIN", response, "en_US")))
    return sock


def test_amqplain_login_with_invalid_utf8_is_refused_not_read_as_the_u_fffd_user(broker, http):
    user = unique("u") + "-\ufffd"
    assert http.put(f"/api/users/{user.replace(chr(0xfffd), '%EF%BF%BD')}",
                    json={"password": "pw", "tags": ""}).status_code == 201
    assert http.put(f"/api/permissions/%2F/{user.replace(chr(0xfffd), '%EF%BF%BD')}",
                    json={"configure": ".*", "write": ".*", "read": ".*"}).status_code == 201
    sock = amqplain_open(broker.amqp_port, user.encode(), b"pw")  # the user's own name: in
    assert b"\x00\x0a\x00\x1e" in sock.recv(65536)  # connection.tune
    sock.close()
    sock = amqplain_open(broker.amqp_port, user.encode().replace(b"\xef\xbf\xbd", b"\xff"), b"pw")
    code, text = close_of(sock)
    assert (code, text.split(" - ")[0]) == (403, "ACCESS_REFUSED"), text
    sock = amqplain_open(broker.amqp_port, user.encode(), b"p\xff")  # nor a password
    assert close_of(sock)[0] == 403


def open_channel(port: int) -> socket.socket:
    sock = raw_open(port)
    sock.sendall(encode_method_frame(1, m.ChannelOpen()))
    sock.recv(65536)  # channel.open-ok
    return sock


@pytest.mark.parametrize("method", [m.QueueDeclare(queue=b"q-\xff-x"),
                                    m.ExchangeDeclare(exchange=b"e-\xff", type="fanout"),
                                    m.BasicPublish(exchange="", routing_key=b"k-\xff")])
def test_amqp_short_strings_that_are_not_utf8_close_the_connection_with_a_clear_502(broker, method):
    sock = open_channel(broker.amqp_port)
    frames = encode_method_frame(1, method)
    if isinstance(method, m.BasicPublish):
        frames += encode_frame(2, 1, struct.pack(">HHQ", 60, 0, 1) + b"\x00\x00") + encode_frame(3, 1, b"x")
    sock.sendall(frames)
    code, text = close_of(sock)
    assert code == 502, text
    assert text.startswith(f"SYNTAX_ERROR - {method.NAME}: ") and "is not valid UTF-8" in text, text
