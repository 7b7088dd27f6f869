"""etcd's v3 data as plain values: what the coordination core reads and what it asks for.

Owner: nobody; immutable values. The shell's client (``server/net/etcd.py``) turns the JSON
gateway's answers into them and the requests into JSON, so the state machine
(``coordination.py``) decides on etcd's results without knowing how they travelled.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

__all__ = [
    "Compare", "Delete", "Get", "KeyValue", "Put", "RequestOp", "TxnResult", "WatchEvent",
    "prefix_end",
]


@dataclass(slots=True, frozen=True)
class KeyValue:
    key: bytes
    value: bytes
    create_revision: int = 0
    mod_revision: int = 0
    version: int = 0
    lease: int = 0


@dataclass(slots=True, frozen=True)
class Compare:
    """One condition of a transaction: ``target`` of ``key`` compared with ``operand``.
    ``create_revision == 0`` is etcd's "the key does not exist"."""

    key: bytes
    target: Literal["CREATE", "MOD", "VERSION", "VALUE"]
    operand: int | bytes
    result: Literal["EQUAL", "NOT_EQUAL", "GREATER", "LESS"] = "EQUAL"


@dataclass(slots=True, frozen=True)
class Put:
    key: bytes
    value: bytes
    lease: int = 0


@dataclass(slots=True, frozen=True)
class Get:
    key: bytes
    prefix: bool = False


@dataclass(slots=True, frozen=True)
class Delete:
    key: bytes
    prefix: bool = False


RequestOp = Put | Get | Delete


@dataclass(slots=True, frozen=True)
class TxnResult:
    """Whether the compares held, and for each Get of the branch taken, the keys it found (an
    empty tuple for a Put or a Delete), in the order the ops were given."""

    succeeded: bool
    revision: int
    ranges: tuple[tuple[KeyValue, ...], ...] = field(default_factory=tuple)


@dataclass(slots=True, frozen=True)
class WatchEvent:
    kind: Literal["PUT", "DELETE"]
    kv: KeyValue


def prefix_end(prefix: bytes) -> bytes:
    """etcd's range end for "every key starting with ``prefix``": the prefix with its last byte
    below 0xff incremented (etcd's own ``clientv3.GetPrefixRangeEnd``)."""
    end = bytearray(prefix)
    for i in range(len(end) - 1, -1, -1):
        if end[i] < 0xFF:
            end[i] += 1
            return bytes(end[: i + 1])
    return b"\0"  # every key
