"""SASL responses of connection.start-ok: PLAIN and RabbitMQ's AMQPLAIN.

A user name or password that is not UTF-8 is refused like a wrong password, never decoded with
U+FFFD: other bytes would then log in as the user whose name has U+FFFD where they differ
(``names.py``'s rule)."""

from __future__ import annotations

from .errors import ConnectionException
from .names import InvalidName, decode_name
from .spec import ReplyCode
from .tables import FrameSyntaxError, decode_value

__all__ = ["MECHANISMS", "parse_response"]

MECHANISMS = ("PLAIN", "AMQPLAIN")


def _refused(mechanism: str) -> ConnectionException:
    return ConnectionException(
        ReplyCode.ACCESS_REFUSED,
        f"ACCESS_REFUSED - Login was refused using authentication mechanism {mechanism}. "
        "For details see the broker logfile.", 10, 11)


def parse_response(mechanism: str, response: bytes) -> tuple[str, str]:
    """(user, password) from a start-ok response; anything malformed is an access refusal."""
    if mechanism == "PLAIN":
        parts = response.split(b"\x00")
        if len(parts) != 3:
            raise _refused(mechanism)
        try:
            return decode_name("user name", parts[1]), decode_name("password", parts[2])
        except InvalidName:
            raise _refused(mechanism) from None
    if mechanism == "AMQPLAIN":
        # a field table without its leading length
        fields: dict[str, object] = {}
        offset = 0
        try:
            while offset < len(response):
                n = response[offset]
                key = response[offset + 1:offset + 1 + n].decode()
                value, offset = decode_value(response, offset + 1 + n)
                fields[key] = value
        except (FrameSyntaxError, IndexError, UnicodeDecodeError):
            raise _refused(mechanism) from None
        user, password = fields.get("LOGIN"), fields.get("PASSWORD")
        try:  # a byte array, or a long string that is not UTF-8, comes out of the table as bytes
            if isinstance(user, bytes):
                user = decode_name("user name", user)
            if isinstance(password, bytes):
                password = decode_name("password", password)
        except InvalidName:
            raise _refused(mechanism) from None
        if not isinstance(user, str) or not isinstance(password, str):
            raise _refused(mechanism)
        return user, password
    raise _refused(mechanism)
