"""Argument kinds of AMQP methods, and the table-driven codec built from them.

A method's dataclass annotates each argument with its wire kind (``ticket: Short = 0``), so every
field is declared once. ``compile_plan`` reads the kinds, in field order, once per method: each run
of fixed-size kinds becomes one precompiled ``struct`` (consecutive bits packed into octets, low bit
first, as the spec says), each string or table a step of its own, and from those steps it generates
the method's encoder and decoder as straight-line code (``Plan.source`` shows them), so nothing
branches on a kind per message. The class and method ids go into the first struct: basic.ack,
basic.qos or connection.tune encode with a single ``struct.pack``.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any

from .tables import FrameSyntaxError, decode_table, encode_table

__all__ = [
    "Bit",
    "Long",
    "LongLong",
    "LongStr",
    "Octet",
    "Plan",
    "Short",
    "ShortStr",
    "Table",
    "Timestamp",
    "compile_plan",
]

Octet = Annotated[int, "octet"]
Short = Annotated[int, "short"]
Long = Annotated[int, "long"]
LongLong = Annotated[int, "longlong"]
Timestamp = Annotated[int, "timestamp"]
Bit = Annotated[bool, "bit"]
ShortStr = Annotated[str, "shortstr"]
LongStr = Annotated[bytes, "longstr"]
Table = Annotated[dict[str, Any], "table"]

KINDS = frozenset(("octet", "short", "long", "longlong", "timestamp", "bit", "shortstr", "longstr", "table"))
_FORMAT = {"octet": "B", "short": "H", "long": "I", "longlong": "Q", "timestamp": "Q", "bit": "B"}
_I = struct.Struct(">I")
_pack_I = _I.pack
_unpack_I = _I.unpack_from


@dataclass(frozen=True, slots=True)
class Plan:
    encode: Callable[[Any], bytes]  # method -> payload, class and method ids first
    decode: Callable[[Any, int], Any]  # (payload, offset of the arguments) -> method
    source: str  # the two functions above, as generated


def _runs(kinds: Sequence[str]) -> list[tuple[str, int, str, tuple[int, ...]]]:
    """(kind or "fixed", first field, struct format, fields per struct slot): a run of fixed-size
    kinds is one struct whose slots are one field each, or up to 8 bits packed in an octet."""
    runs: list[tuple[str, int, str, tuple[int, ...]]] = []
    i = 0
    while i < len(kinds):
        if kinds[i] not in _FORMAT:
            runs.append((kinds[i], i, "", ()))
            i += 1
            continue
        start, fmt, slots = i, ">", []
        while i < len(kinds) and kinds[i] in _FORMAT:
            fmt += _FORMAT[kinds[i]]
            count = 0
            while i < len(kinds) and kinds[i] == "bit" and count < 8:
                count += 1
                i += 1
            if not count:
                i += 1
            slots.append(count)
        runs.append(("fixed", start, fmt, tuple(slots)))
    return runs


def compile_plan(cls: type, class_id: int, method_id: int, names: Sequence[str], kinds: Sequence[str]) -> Plan:
    """Generate the encoder and decoder of one method from its field names and kinds (as
    ``dataclasses`` generates ``__init__``): straight-line code, one expression per step."""
    assert all(name.isidentifier() for name in names)
    env: dict[str, Any] = {"cls": cls, "head": struct.pack(">HH", class_id, method_id), "_short": _short,
                           "_long": _long, "encode_table": encode_table, "_short_at": _short_at,
                           "_long_at": _long_at, "decode_table": decode_table}
    encode: list[str] = []
    decode: list[str] = []
    for n, (kind, start, fmt, slots) in enumerate(_runs(kinds)):
        if kind != "fixed":
            encode.append(f"{_ENCODE[kind]}(method.{names[start]})")
            decode.append(f"f{start}, offset = {_DECODE[kind]}(buf, offset)")
            continue
        args, targets, expand = [], [], []
        i = start
        for count in slots:
            if not count:  # a plain field
                args.append(f"method.{names[i]}")
                targets.append(f"f{i}")
                i += 1
                continue
            args.append(" | ".join(f"({1 << bit} if method.{names[i + bit]} else 0)" for bit in range(count)))
            targets.append(f"bits{i}")
            expand += [f"f{i + bit} = bool(bits{i} & {1 << bit})" for bit in range(count)]
            i += count
        env[f"_unpack{n}"] = struct.Struct(fmt).unpack_from
        decode += [f"{', '.join(targets)}, = _unpack{n}(buf, offset)", f"offset += {struct.calcsize(fmt)}", *expand]
        if n == 0:  # the ids go into the first struct
            fmt = ">HH" + fmt[1:]
            args[:0] = [str(class_id), str(method_id)]
        env[f"_pack{n}"] = struct.Struct(fmt).pack
        encode.append(f"_pack{n}({', '.join(args)})")
    if not encode or not encode[0].startswith("_pack0("):
        encode.insert(0, "head")
    body = encode[0] if len(encode) == 1 else f"b\"\".join(({', '.join(encode)},))"
    source = "\n".join([
        "def encode(method):", f"    return {body}", "", "",
        "def decode(buf, offset):", *(f"    {line}" for line in decode),
        f"    return cls({', '.join(f'f{i}' for i in range(len(names)))})", "",
    ])
    exec(compile(source, f"<codec of {cls.__name__}>", "exec"), env)  # source generated above from the kinds
    return Plan(env["encode"], env["decode"], source)


_ENCODE = {"shortstr": "_short", "longstr": "_long", "table": "encode_table"}
_DECODE = {"shortstr": "_short_at", "longstr": "_long_at", "table": "decode_table"}


def _short(value: str | bytes) -> bytes:
    raw = value.encode() if isinstance(value, str) else bytes(value)
    if len(raw) > 255:
        raw = raw[:255]
    return bytes((len(raw),)) + raw


def _long(value: str | bytes) -> bytes:
    raw = value.encode() if isinstance(value, str) else bytes(value)
    return _pack_I(len(raw)) + raw


def _short_at(buf: Any, offset: int) -> tuple[str, int]:
    stop = offset + 1 + buf[offset]
    if stop > len(buf):
        raise FrameSyntaxError("short string past the end of the frame")
    return bytes(buf[offset + 1:stop]).decode(), stop


def _long_at(buf: Any, offset: int) -> tuple[bytes, int]:
    stop = offset + 4 + _unpack_I(buf, offset)[0]
    if stop > len(buf):
        raise FrameSyntaxError("long string past the end of the frame")
    return bytes(buf[offset + 4:stop]), stop
