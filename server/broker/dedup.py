"""Publish deduplication, after LavinMQ's ``x-message-deduplication``: a message whose key was seen
within an exchange's (or a queue's) window is confirmed but neither routed nor stored.

Switched on by the declare argument ``x-message-deduplication: true`` on an exchange or a queue;
``x-cache-size`` bounds the window's count (default 128, as LavinMQ), ``x-cache-ttl`` its age in ms
(default: none), and a message's own ``x-cache-ttl`` header overrides the latter. The key is the
value of the header named by ``x-deduplication-header`` (default: the header
``x-deduplication-header``), or else the message-id property.

Rule 1: ``Dedup`` owns every window; the vhost's publish path calls ``screen`` once per publish.
Rule 2: deterministic: ``now`` (seconds, the broker's wall clock) is passed in, so an expiry is an
absolute time that stays meaningful across a restart. Windows are created on first use from the
declare arguments, taking what the journal recovered for them (``restore``); every key added is
also queued for the I/O shell (``take_added``), which journals it before the confirms of the same
group go out, so a key whose publish was confirmed after an fsync survives a kill.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from headrace.server.amqp.properties import decode_properties

__all__ = [
    "ARG_ENABLE",
    "ARG_HEADER",
    "ARG_SIZE",
    "ARG_TTL",
    "DEFAULT_HEADER",
    "DEFAULT_SIZE",
    "Dedup",
    "Window",
    "window_id",
]

ARG_ENABLE = "x-message-deduplication"
ARG_SIZE = "x-cache-size"
ARG_TTL = "x-cache-ttl"
ARG_HEADER = "x-deduplication-header"
DEFAULT_HEADER = "x-deduplication-header"
DEFAULT_SIZE = 128
# message-id is flag bit 7 of the properties' 16-bit flag word (its second byte)
_MESSAGE_ID_FLAG = 0x80


def window_id(kind: str, vhost: str, name: str) -> str:
    """``exchange`` or ``queue``, vhost, name: one string, the journal's key for a window."""
    return f"{kind}\x00{vhost}\x00{name}"


def _positive(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _key(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "surrogateescape")
    return str(value)


@dataclass(slots=True)
class Window:
    """Keys seen lately, oldest first; bounded by ``size`` and (per key) by an expiry time."""
    size: int
    ttl_ms: int | None = None
    header: str = DEFAULT_HEADER
    # key -> expires at (None: never), oldest first; an OrderedDict because dropping the oldest of a
    # plain dict is O(deleted slots) until it resizes, which a full window hits on every add
    entries: OrderedDict[str, float | None] = field(default_factory=OrderedDict)

    @classmethod
    def from_arguments(cls, arguments: Mapping[str, Any]) -> Window | None:
        if arguments.get(ARG_ENABLE) is not True:
            return None
        header = arguments.get(ARG_HEADER)
        return cls(_positive(arguments.get(ARG_SIZE)) or DEFAULT_SIZE, _positive(arguments.get(ARG_TTL)),
                   header if isinstance(header, str) and header else DEFAULT_HEADER)

    def seen(self, key: str, now: float) -> bool:
        if key not in self.entries:
            return False
        expires = self.entries[key]
        if expires is None or expires > now:
            return True
        del self.entries[key]
        return False

    def add(self, key: str, now: float, ttl_ms: int | None = None) -> float | None:
        """Remembers ``key`` (the newest), dropping the oldest keys beyond ``size``; returns its expiry."""
        entries = self.entries
        entries.pop(key, None)
        while len(entries) >= self.size:
            entries.popitem(last=False)
        ttl = ttl_ms if ttl_ms is not None else self.ttl_ms
        expires = now + ttl / 1000 if ttl is not None else None
        entries[key] = expires
        return expires

    def load(self, items: Iterable[tuple[str, float | None]], now: float) -> None:
        """Recovered keys, oldest first: the live ones, within ``size``."""
        for key, expires in items:
            if expires is None or expires > now:
                self.entries.pop(key, None)
                self.entries[key] = expires
        while len(self.entries) > self.size:
            self.entries.popitem(last=False)

    def key_of(self, headers: Mapping[str, Any] | None, props_raw: bytes) -> str | None:
        if headers:
            key = _key(headers.get(self.header))
            if key is not None:
                return key
        if len(props_raw) >= 2 and props_raw[1] & _MESSAGE_ID_FLAG:
            return decode_properties(props_raw).message_id or None
        return None


def _ttl_override(headers: Mapping[str, Any] | None) -> int | None:
    return _positive(headers.get(ARG_TTL)) if headers else None


class Dedup:
    def __init__(self) -> None:
        self.windows: dict[str, Window] = {}
        self._restored: dict[str, list[tuple[str, float | None]]] = {}
        self._added: list[tuple[str, str, float | None]] = []  # (window id, key, expires) to journal

    # ------------------------------------------------------------------ windows
    def _window(self, wid: str, arguments: Mapping[str, Any], now: float) -> Window | None:
        window = self.windows.get(wid)
        if window is None:
            window = Window.from_arguments(arguments)
            if window is None:
                return None
            window.load(self._restored.pop(wid, ()), now)
            self.windows[wid] = window
        return window

    def _check(self, wid: str, arguments: Mapping[str, Any], headers: Mapping[str, Any] | None,
               props_raw: bytes, now: float) -> bool:
        if arguments.get(ARG_ENABLE) is not True:
            return False
        window = self._window(wid, arguments, now)
        if window is None:
            return False
        key = window.key_of(headers, props_raw)
        if key is None:
            return False
        if window.seen(key, now):
            return True
        self._added.append((wid, key, window.add(key, now, _ttl_override(headers))))
        return False

    def screen(self, vhost: str, exchange: str, exchange_arguments: Mapping[str, Any],
               queue_names: Sequence[str], queues: Mapping[str, Any], props_raw: bytes,
               headers: Mapping[str, Any] | None, now: float) -> Sequence[str] | None:
        """The queues a routed message still goes to: None when it is a duplicate for the exchange,
        or for every queue it was routed to; the queues whose own window saw it are left out."""
        if exchange_arguments and ARG_ENABLE in exchange_arguments \
                and self._check(window_id("exchange", vhost, exchange), exchange_arguments, headers, props_raw, now):
            return None
        kept: list[str] | None = None
        for i, name in enumerate(queue_names):
            queue = queues.get(name)
            arguments = queue.arguments if queue is not None else None
            if arguments and ARG_ENABLE in arguments \
                    and self._check(window_id("queue", vhost, name), arguments, headers, props_raw, now):
                if kept is None:
                    kept = list(queue_names[:i])
            elif kept is not None:
                kept.append(name)
        if kept is None:
            return queue_names
        return kept or None

    # ------------------------------------------------------------------ persistence
    def take_added(self) -> list[tuple[str, str, float | None]]:
        added, self._added = self._added, []
        return added

    def restore(self, items: Iterable[tuple[str, str, float | None]]) -> None:
        """Keys recovered from the journal, oldest first; each window takes its own when created."""
        for wid, key, expires in items:
            self._restored.setdefault(wid, []).append((key, expires))

    def snapshot(self, now: float) -> list[tuple[str, str, float | None]]:
        """Every live key, oldest first per window, the restored ones not yet claimed included: what
        a compacted journal holds."""
        out: list[tuple[str, str, float | None]] = []
        for wid, items in self._restored.items():
            out.extend((wid, k, e) for k, e in items if e is None or e > now)
        for wid, window in self.windows.items():
            out.extend((wid, k, e) for k, e in window.entries.items() if e is None or e > now)
        return out
