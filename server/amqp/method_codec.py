"""The method registry and the generic method codec.

Rule: this module owns ``METHODS``, the table of method classes by (class id, method id). The
``amqp_method`` decorator adds a class to it and reads the class's dataclass fields and their kind
annotations once; ``fields.compile_plan`` turns them into the encoder and decoder that
``encode_method`` and ``decode_method`` call.
The publish/deliver/ack hot path does not come through here: ``codec.py`` has hand-written
encoders and decoders for those.
"""

from __future__ import annotations

import dataclasses
import struct
import typing
from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

from .errors import ConnectionException
from .fields import KINDS, Plan, compile_plan
from .names import not_utf8
from .spec import ReplyCode
from .tables import FrameSyntaxError

__all__ = ["METHODS", "Method", "amqp_method", "decode_method", "encode_method", "not_utf8_method"]

_CM = struct.Struct(">HH")


class Method:
    """Base of every method dataclass: what the decorator sets on the class."""

    __slots__ = ()
    CLASS_ID: ClassVar[int]
    METHOD_ID: ClassVar[int]
    NAME: ClassVar[str]
    HAS_CONTENT: ClassVar[bool]
    FIELDS: ClassVar[tuple[tuple[str, str], ...]]  # (name, kind) in wire order, read from the annotations
    PLAN: ClassVar[Plan]


METHODS: dict[tuple[int, int], type[Method]] = {}

M = TypeVar("M", bound=type[Method])


def amqp_method(class_id: int, method_id: int, name: str, *, content: bool = False) -> Callable[[M], M]:
    """Register a slotted dataclass (frozen, but for the few decoded once per message) as the
    method ``name`` with these ids."""

    def register(cls: M) -> M:
        if not dataclasses.is_dataclass(cls):
            raise TypeError(f"{name}: {cls.__name__} is not a dataclass")
        hints = typing.get_type_hints(cls, include_extras=True)
        fields = []
        for f in dataclasses.fields(cls):
            kind = next((meta for meta in getattr(hints[f.name], "__metadata__", ()) if meta in KINDS), None)
            if kind is None:
                raise TypeError(f"{cls.__name__}.{f.name}: annotate it with a field kind from fields.py")
            fields.append((f.name, kind))
        if (class_id, method_id) in METHODS:
            raise TypeError(f"{name}: ids {class_id}.{method_id} already taken")
        cls.CLASS_ID = class_id
        cls.METHOD_ID = method_id
        cls.NAME = name
        cls.HAS_CONTENT = content
        cls.FIELDS = tuple(fields)
        cls.PLAN = compile_plan(cls, class_id, method_id, [n for n, _ in fields], [k for _, k in fields])
        METHODS[(class_id, method_id)] = cls
        return cls

    return register


def encode_method(method: Method) -> bytes:
    """Method frame payload: class id, method id, arguments."""
    encoded: bytes = method.PLAN.encode(method)
    return encoded


def not_utf8_method(name: str, exc: UnicodeDecodeError, class_id: int, method_id: int) -> ConnectionException:
    """A method whose short string is not UTF-8: a syntax error (a field's value is not what the
    protocol allows), closing the connection, rather than a name read with U+FFFD that would be
    another name's object. The text quotes the string's bytes, so the client sees which field."""
    reason = not_utf8("short string", bytes(exc.object), exc.start)
    return ConnectionException(ReplyCode.SYNTAX_ERROR, f"SYNTAX_ERROR - {name}: {reason}", class_id, method_id)


def decode_method(payload: bytes | memoryview) -> Any:
    """Parse a method frame payload; bad input raises ``ConnectionException`` (the spec makes
    malformed methods a connection error)."""
    if len(payload) < 4:
        raise ConnectionException(ReplyCode.FRAME_ERROR, "FRAME_ERROR - method frame too short")
    class_id, method_id = _CM.unpack_from(payload, 0)
    cls = METHODS.get((class_id, method_id))
    if cls is None:
        raise ConnectionException(ReplyCode.COMMAND_INVALID,
                                  f"COMMAND_INVALID - unknown method {class_id}.{method_id}", class_id, method_id)
    try:
        return cls.PLAN.decode(payload, 4)
    except UnicodeDecodeError as exc:  # a short string (a name, a routing key): names.py's rule
        raise not_utf8_method(cls.NAME, exc, class_id, method_id) from None
    except (struct.error, IndexError, FrameSyntaxError) as exc:
        raise ConnectionException(ReplyCode.SYNTAX_ERROR, f"SYNTAX_ERROR - malformed {cls.NAME}: {exc}",
                                  class_id, method_id) from None
