"""Headers exchange: x-match all / any / all-with-x / any-with-x over binding arguments."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from .base import Destination, Exchange
from .binding import Binding
from .errors import ArgumentError

__all__ = ["HeadersExchange"]

_MODES = ("all", "any", "all-with-x", "any-with-x")


def _match_mode(args: Mapping[str, Any]) -> str:
    mode = args.get("x-match", "all")
    if isinstance(mode, bytes):
        mode = mode.decode("utf-8", "replace")
    if mode not in _MODES:
        raise ArgumentError(f"Invalid x-match field value {mode!r}; expected one of {', '.join(_MODES)}")
    return str(mode)


class HeadersExchange(Exchange):
    TYPE = "headers"
    USES_HEADERS = True

    def __init__(self, name: str, **kw: Any) -> None:
        super().__init__(name, **kw)
        self._rules: dict[Binding, tuple[bool, tuple[tuple[str, Any], ...], Destination]] = {}

    def _add(self, b: Binding) -> None:
        args = b.arguments_dict()
        mode = _match_mode(args)
        with_x = mode.endswith("-with-x")
        pairs = tuple((k, v) for k, v in args.items() if k != "x-match" and (with_x or not k.startswith("x-")))
        self._rules[b] = (mode.startswith("all"), pairs, (b.kind, b.destination))

    def bind(self, b: Binding) -> bool:
        _match_mode(b.arguments_dict())  # validate before storing
        return super().bind(b)

    def _remove(self, b: Binding) -> None:
        self._rules.pop(b, None)

    def destinations(self, routing_key: str, headers: Mapping[str, Any] | None) -> Collection[Destination]:
        headers = headers or {}
        out: dict[Destination, None] = {}
        for match_all, pairs, dest in self._rules.values():
            if dest in out:
                continue
            if match_all:
                ok = all(_matches(headers, k, v) for k, v in pairs)
            else:
                ok = any(_matches(headers, k, v) for k, v in pairs)
            if ok:
                out[dest] = None
        return out


def _matches(headers: Mapping[str, Any], key: str, expected: Any) -> bool:
    if key not in headers:
        return False
    if expected is None:  # a void argument matches on presence
        return True
    actual = headers[key]
    if isinstance(actual, bytes) and isinstance(expected, str):
        actual = actual.decode("utf-8", "replace")
    # 1 == True in Python but not in AMQP tables: a bool only matches a bool
    return bool(actual == expected) and isinstance(actual, bool) == isinstance(expected, bool)
