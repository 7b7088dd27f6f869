"""The names rule (``server/amqp/names.py``) as a table: what it admits, what it refuses and why,
and the edges that use it (AMQPLAIN and PLAIN logins, the method decoder)."""

from __future__ import annotations

import struct

import pytest

from headrace.server.amqp import methods as m
from headrace.server.amqp.errors import ConnectionException
from headrace.server.amqp.method_codec import decode_method, encode_method
from headrace.server.amqp.names import MAX_NAME_BYTES, InvalidName, check_name, decode_name
from headrace.server.amqp.sasl import parse_response

ADMITTED = [
    # (name, path_segment): what comes back is the name as text
    ("q", True),
    ("", False),  # empty: the caller's rule (a server-named queue, the default exchange)
    ("x" * 255, True),
    ("\u00e9" * 127 + "x", True),  # 255 bytes in 128 characters
    ("\U0001f430" * 63 + "abc", True),  # 4-byte characters: 255 bytes
    ("a\ufffdb", True),  # U+FFFD is a character like any other when the client sent it
    (".", False),  # AMQP and definitions: RabbitMQ 3.10 accepts '.' and '..'
    ("..", False),
    ("...", True),  # only the two segments a URL resolves away
    (".hidden", True),
    ("a/b", True),  # a percent-encoded slash is an ordinary character of a name
    ("a.b.#", False),  # routing keys and topic patterns
]


@pytest.mark.parametrize(("name", "path_segment"), ADMITTED)
def test_admitted(name: str, path_segment: bool) -> None:
    assert check_name("queue name", name, path_segment=path_segment) == name
    assert check_name("queue name", name.encode(), path_segment=path_segment) == name


REFUSED = [
    # (name, path_segment, words of the reason)
    ("x" * 256, False, ["queue name is 256 bytes long", "at most 255 bytes"]),
    ("\u00e9" * 128, False, ["is 256 bytes long"]),  # 128 characters, 256 bytes
    ("\U0001f430" * 64, True, ["is 256 bytes long"]),
    ("a\udcffb", False, ["not valid UTF-8", "lone surrogate", "U+DCFF", "character 1"]),  # JSON "\udcff"
    ("\ud83d", False, ["lone surrogate"]),  # half of a surrogate pair
    (b"a\xffb", False, ["b'a\\xffb' is not valid UTF-8", "byte 0xff at offset 1"]),
    (b"\xc3", False, ["not valid UTF-8", "0xc3 at offset 0"]),  # truncated 2-byte sequence
    (b"\xed\xa0\x80", False, ["not valid UTF-8"]),  # an encoded surrogate (CESU-8)
    (b"\xc0\xaf", False, ["not valid UTF-8"]),  # overlong '/'
    (b"x" * 300 + b"\xff", False, ["not valid UTF-8", "...", "offset 300"]),  # quoted shortened
    (b"x" * 256, False, ["256 bytes long"]),
    (".", True, ["'.' is not a valid queue name", "URL path segment"]),
    ("..", True, ["'..' is not a valid queue name"]),
]


@pytest.mark.parametrize(("name", "path_segment", "words"), REFUSED)
def test_refused(name: str | bytes, path_segment: bool, words: list[str]) -> None:
    with pytest.raises(InvalidName) as caught:
        check_name("queue name", name, path_segment=path_segment)
    assert isinstance(caught.value, ValueError)  # the HTTP router's 400 bad_request
    reason = str(caught.value)
    for word in words:
        assert word in reason, reason
    assert len(reason) < 200  # fits a reply text (a shortstr) with its code's name


def test_the_limit_is_one_shortstr() -> None:
    assert MAX_NAME_BYTES == 255
    assert decode_name("path segment", b"caf\xc3\xa9") == "caf\u00e9"


@pytest.mark.parametrize("raw", [b"u-\xff", b"\xef\xbf", b"u\xed\xa0\x80"])
@pytest.mark.parametrize("mechanism", ["PLAIN", "AMQPLAIN"])
def test_logins_that_are_not_utf8_are_refused_not_read_with_u_fffd(mechanism: str, raw: bytes) -> None:
    def response(login: bytes, password: bytes) -> bytes:
        if mechanism == "PLAIN":
            return b"\x00" + login + b"\x00" + password
        return b"".join(bytes((len(k),)) + k + b"S" + struct.pack(">I", len(v)) + v
                        for k, v in ((b"LOGIN", login), (b"PASSWORD", password)))
    assert parse_response(mechanism, response("u-\ufffd".encode(), b"pw")) == ("u-\ufffd", "pw")
    for login, password in ((raw, b"pw"), (b"guest", raw)):
        with pytest.raises(ConnectionException) as caught:
            parse_response(mechanism, response(login, password))
        assert caught.value.reply_code == 403


@pytest.mark.parametrize("method", [m.QueueDeclare(queue=b"q\xff"), m.ExchangeBind(destination="d", source=b"\x80"),
                                    m.BasicConsume(queue="q", consumer_tag=b"t\xfe"),
                                    m.ConnectionOpen(virtual_host=b"v\xc3")])
def test_a_method_whose_short_string_is_not_utf8_is_a_502_naming_the_method(method: m.Method) -> None:
    with pytest.raises(ConnectionException) as caught:
        decode_method(encode_method(method))
    assert caught.value.reply_code == 502
    text = caught.value.reply_text
    assert text.startswith(f"SYNTAX_ERROR - {method.NAME}: short string b'") and "is not valid UTF-8" in text, text
