"""The ``x-death`` header RabbitMQ writes on a dead-lettered message."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any


__all__ = ["x_death_headers"]


def x_death_headers(headers: Mapping[str, Any] | None, *, queue: str, reason: str, exchange: str,
                    routing_keys: list[str], now: float, original_expiration: str | None = None) -> dict[str, Any]:
    """New headers for a dead-lettered message: the ``x-death`` list (latest first, one entry per
    queue and reason with a count), ``x-first-death-*`` once, ``x-last-death-*`` every time. A
    per-message ``expiration`` the message carried is kept as the entry's ``original-expiration``
    (the caller removes the property so the message does not expire again)."""
    out = dict(headers or {})
    out.pop("BCC", None)
    deaths = [dict(d) for d in out.get("x-death") or [] if isinstance(d, Mapping)]
    when = datetime.fromtimestamp(int(now), timezone.utc)
    for i, death in enumerate(deaths):
        if death.get("queue") == queue and death.get("reason") == reason:
            death["count"] = int(death.get("count", 1)) + 1
            death["time"] = when
            if original_expiration is not None:
                death["original-expiration"] = original_expiration
            deaths.insert(0, deaths.pop(i))
            break
    else:
        entry: dict[str, Any] = {"count": 1, "reason": reason, "queue": queue, "time": when,
                                 "exchange": exchange, "routing-keys": list(routing_keys)}
        if original_expiration is not None:
            entry["original-expiration"] = original_expiration
        deaths.insert(0, entry)
    out["x-death"] = deaths
    if "x-first-death-reason" not in out:
        out["x-first-death-reason"] = reason
        out["x-first-death-queue"] = queue
        out["x-first-death-exchange"] = exchange
    out["x-last-death-reason"] = reason
    out["x-last-death-queue"] = queue
    out["x-last-death-exchange"] = exchange
    return out
