"""The one rule for names: queues, exchanges, vhosts, users, and routing keys, over AMQP and HTTP.

Rule: a name is text AMQP can carry, which is what ``check_name`` checks and every edge calls it for
(the AMQP codec through ``not_utf8``, the logins and the HTTP router's path segments through
``decode_name``, the HTTP handlers and bodies for the names, routing keys and short-string message
properties they take, the stream owner for a tracked consumer's name). It owns no state.

Why these three checks:

- At most 255 bytes, the most a shortstr holds. AMQP carries every name and routing key as a
  shortstr, so an object named longer through the HTTP API or a definitions document could never be
  declared, bound, published to or consumed from by an AMQP client, and a message's longer routing
  key would have to be cut to be delivered.
- Valid UTF-8. Bytes that are not are refused, never decoded with U+FFFD: two names differing only
  in such bytes would then be one object (or one user, at login). A Python string can hold what
  UTF-8 cannot (a lone surrogate, which JSON's ``"\\udcff"`` escape makes), so a string is checked
  by encoding it.
- Not ``.`` or ``..`` where the name becomes a URL path segment (objects the HTTP API creates):
  clients and proxies resolve those segments away, so such an object could never be addressed
  again. Over AMQP RabbitMQ 3.10 accepts both names, for queues and exchanges alike
  (``rabbit_channel:check_name`` checks only the ``amq.`` prefix), so AMQP and a definitions
  document (RabbitMQ's export may hold them) accept them here too.
"""

from __future__ import annotations

__all__ = ["MAX_NAME_BYTES", "InvalidName", "check_name", "decode_name", "not_utf8"]

MAX_NAME_BYTES = 255  # a shortstr's length is one octet
_PATH_DOTS = (".", "..")
_SHOWN = 32  # bytes of a refused name quoted back: a reply text is itself a shortstr


class InvalidName(ValueError):
    """A name the rule refuses. A ``ValueError``, so the HTTP router answers it 400 bad_request
    with this text as the reason, as it does any other bad value."""


def not_utf8(kind: str, raw: bytes, at: int) -> InvalidName:
    """The refusal of ``raw``, which is not UTF-8 from offset ``at`` (where decoding stopped)."""
    shown = repr(raw[:_SHOWN]) + ("..." if len(raw) > _SHOWN else "")
    return InvalidName(f"{kind} {shown} is not valid UTF-8 (byte 0x{raw[at]:02x} at offset {at})")


def decode_name(kind: str, raw: bytes) -> str:
    """``raw`` as text, or ``InvalidName``: never a lossy decode."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise not_utf8(kind, raw, exc.start) from None


def check_name(kind: str, name: str | bytes, *, path_segment: bool = False) -> str:
    """``name`` (text, or bytes to decode) if the rule admits it, else ``InvalidName`` saying why.
    ``kind`` names it in the refusal ("queue name", "routing key"); ``path_segment`` refuses ``.``
    and ``..`` too."""
    if isinstance(name, bytes):
        text = decode_name(kind, name)
        size = len(name)
    else:
        text = name
        try:
            size = len(name.encode("utf-8"))
        except UnicodeEncodeError as exc:
            raise InvalidName(f"{kind} is not valid UTF-8 (a lone surrogate, U+{ord(name[exc.start]):04X}, "
                              f"at character {exc.start})") from None
    if size > MAX_NAME_BYTES:
        raise InvalidName(f"{kind} is {size} bytes long; at most {MAX_NAME_BYTES} bytes of UTF-8 are allowed "
                          "(AMQP's short string)")
    if path_segment and text in _PATH_DOTS:
        raise InvalidName(f"'{text}' is not a valid {kind}: a URL path segment of '.' or '..' names no object")
    return text
