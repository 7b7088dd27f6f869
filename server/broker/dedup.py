"""Publish deduplication, after LavinMQ's ``x-message-deduplication``: a message whose key was seen
within an exchange's (or a queue's) window is confirmed but neither routed nor stored.

Switched on by the declare argument ``x-message-deduplication: true`` on an exchange or a queue;
``x-cache-size`` bounds the window's count (default 128, as LavinMQ), ``x-cache-ttl`` its age in ms
(default: none), and a message's own ``x-cache-ttl`` header overrides the latter. The key is the
value of the header named by ``x-deduplication-header`` (default: the header
``x-deduplication-header``), or else the message-id property.

Rule 1: ``Dedup`` owns every window; the vhost's publish path calls ``screen`` once per publish and,
once the queues have taken or refused the message, ``commit``: a key is remembered only where the
publish was accepted (the exchange's window when the publisher gets an ack, a queue's window when
that queue took it), so a publish a queue refused (``reject-publish``: a nack) can be retried.
Rule 2: deterministic: ``now`` (seconds, the broker's wall clock) is passed in, so an expiry is an
absolute time that stays meaningful across a restart. Windows are created on first use from the
declare arguments, taking what the journal recovered for them (``restore``); every key added is
also queued for the I/O shell (``take_added``), which journals it before the confirms of the same
group go out, so a key whose publish was confirmed after an fsync survives a kill.
Rule 3: a window dies with its exchange or queue (``drop``, ``drop_vhost``): the drop is queued for
the journal in order with the keys (an entry whose key is ``DROPPED``), so a re-declared namesake
starts empty, after a restart too; recovery also forgets windows whose object is gone
(``keep_only``), which covers a kill before the drop was journaled.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
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
    "DROPPED",
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
# the key of a journal entry that says "this window was deleted": what came before it is void
DROPPED = None
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
        # (window id, key or DROPPED, expires) to journal, in order
        self._added: list[tuple[str, str | None, float | None]] = []
        # (queue name or None for the exchange, window id, window, key, TTL override): keys of the
        # publish being screened, remembered by ``commit`` where it was accepted
        self._pending: list[tuple[str | None, str, Window, str, int | None]] = []
        # window id -> the arguments a policy gives that exchange or queue (policies.py merges them)
        self.policy_arguments: dict[str, dict[str, Any]] = {}

    def set_policy_arguments(self, wid: str, arguments: dict[str, Any] | None) -> None:
        """A policy's dedup keys now apply to ``wid`` (None: none do); its window takes the new size,
        TTL and header, keeping its keys, or goes when dedup is off."""
        if arguments is None:
            if self.policy_arguments.pop(wid, None) is not None:
                self.windows.pop(wid, None)
            return
        if self.policy_arguments.get(wid) == arguments:
            return
        self.policy_arguments[wid] = arguments
        window = self.windows.get(wid)
        fresh = Window.from_arguments(arguments)
        if window is not None and fresh is None:
            del self.windows[wid]
        elif window is not None and fresh is not None:
            window.size, window.ttl_ms, window.header = fresh.size, fresh.ttl_ms, fresh.header

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
               props_raw: bytes, now: float, queue: str | None) -> bool:
        """True: a duplicate in ``wid``'s window. Otherwise the key (if any) waits in ``_pending``
        for ``commit``."""
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
        self._pending.append((queue, wid, window, key, _ttl_override(headers)))
        return False

    def applies(self, vhost: str, exchange: str, exchange_arguments: Mapping[str, Any],
                queue_names: Sequence[str], queues: Mapping[str, Any]) -> bool:
        """Whether a window would look at a publish through ``exchange`` routed to ``queue_names``.
        When none would, ``screen`` returns the names as they are whatever the message, so a run of
        such publishes (``Delivery.publish_run``) need not ask it for each."""
        by_policy = self.policy_arguments
        declared: list[tuple[str, str, Mapping[str, Any] | None]] = [("exchange", exchange, exchange_arguments)]
        declared += [("queue", name, getattr(queues.get(name), "arguments", None)) for name in queue_names]
        for kind, name, arguments in declared:
            if by_policy:
                arguments = by_policy.get(window_id(kind, vhost, name), arguments)
            if arguments and arguments.get(ARG_ENABLE) is True:
                return True
        return False

    def screen(self, vhost: str, exchange: str, exchange_arguments: Mapping[str, Any],
               queue_names: Sequence[str], queues: Mapping[str, Any], props_raw: bytes,
               headers: Mapping[str, Any] | None, now: float) -> Sequence[str] | None:
        """The queues a routed message still goes to: None when it is a duplicate for the exchange,
        or for every queue it was routed to; the queues whose own window saw it are left out. The
        new keys wait for ``commit`` (``pending`` says whether any does)."""
        if self._pending:
            self._pending = []
        by_policy = self.policy_arguments
        if by_policy:
            exchange_arguments = by_policy.get(window_id("exchange", vhost, exchange), exchange_arguments)
        if exchange_arguments and ARG_ENABLE in exchange_arguments \
                and self._check(window_id("exchange", vhost, exchange), exchange_arguments, headers, props_raw,
                                now, None):
            return None
        kept: list[str] | None = None
        for i, name in enumerate(queue_names):
            queue = queues.get(name)
            arguments = queue.arguments if queue is not None else None
            if by_policy:
                arguments = by_policy.get(window_id("queue", vhost, name), arguments)
            if arguments and ARG_ENABLE in arguments \
                    and self._check(window_id("queue", vhost, name), arguments, headers, props_raw, now, name):
                if kept is None:
                    kept = list(queue_names[:i])
            elif kept is not None:
                kept.append(name)
        if kept is None:
            return queue_names
        return kept or None

    @property
    def pending(self) -> bool:
        return bool(self._pending)

    def commit(self, now: float, acked: bool, accepted: Callable[[str], bool] | None = None) -> None:
        """The publish ``screen`` last passed is settled: the exchange's key is remembered when the
        publisher gets an ack (``acked``), a queue's when ``accepted(queue)`` (it took the message)."""
        pending, self._pending = self._pending, []
        for queue, wid, window, key, ttl in pending:
            if (acked if queue is None else accepted is not None and accepted(queue)) \
                    and self.windows.get(wid) is window:
                self._added.append((wid, key, window.add(key, now, ttl)))

    def drop(self, kind: str, vhost: str, name: str) -> bool:
        """The exchange or queue is deleted: its window goes, in memory and (queued) in the journal.
        True when there was one (the journal has an entry to write)."""
        wid = window_id(kind, vhost, name)
        self.policy_arguments.pop(wid, None)
        had = self.windows.pop(wid, None) is not None
        had = self._restored.pop(wid, None) is not None or had
        if had:
            self._added.append((wid, DROPPED, None))
        return had

    def drop_vhost(self, vhost: str) -> bool:
        """Every window of a deleted vhost goes (its exchanges are not deleted one by one)."""
        dropped = False
        for wid in [w for w in (*self.windows, *self._restored, *self.policy_arguments)
                    if w.split("\x00")[1] == vhost]:
            kind, _, name = wid.split("\x00", 2)
            dropped = self.drop(kind, vhost, name) or dropped
        return dropped

    # ------------------------------------------------------------------ persistence
    def take_added(self) -> list[tuple[str, str | None, float | None]]:
        added, self._added = self._added, []
        return added

    def restore(self, items: Iterable[tuple[str, str | None, float | None]]) -> None:
        """Journal entries, oldest first; each window takes its keys when created. A ``DROPPED``
        entry voids what its window had before it."""
        restored = self._restored
        for wid, key, expires in items:
            if key is DROPPED:
                restored.pop(wid, None)
            else:
                restored.setdefault(wid, []).append((key, expires))

    def keep_only(self, exists: Callable[[str, str, str], bool]) -> None:
        """Recovery: forgets the recovered windows whose exchange or queue (kind, vhost, name) is
        gone (deleted, or transient and so not restored)."""
        for wid in list(self._restored):
            kind, vhost, name = wid.split("\x00", 2)
            if not exists(kind, vhost, name):
                del self._restored[wid]

    def snapshot(self, now: float) -> list[tuple[str, str, float | None]]:
        """Every live key, oldest first per window, the restored ones not yet claimed included: what
        a compacted journal holds."""
        out: list[tuple[str, str, float | None]] = []
        for wid, items in self._restored.items():
            out.extend((wid, k, e) for k, e in items if e is None or e > now)
        for wid, window in self.windows.items():
            out.extend((wid, k, e) for k, e in window.entries.items() if e is None or e > now)
        return out
