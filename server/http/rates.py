"""Rates for the management API (RabbitMQ's ``*_details: {"rate": per second}``).

Rates come from counters the broker keeps anyway (a queue's, an exchange's, a connection's socket
counters, the churn counters), sampled whenever the API renders them, with the time the shell
stamped on the request (``ctx.now``): no clock reads here, and nothing added to the message path.
Each rate is a decaying average of the rates between samples, weighted by elapsed time (about
``HALF_LIFE`` seconds of memory), so a burst shows right away and fades once traffic stops.

A key names what was sampled: its first element is the kind (``"queue"``, ``"exchange"``,
``"vhost"``, ``"connection"``, ...), so a listing can ``forget`` the samples of its kind's objects
that are gone. Counters only go up (a drop means the object was replaced: no traffic); gauges such
as a queue's depth are sampled ``signed`` and their rate may be negative, as RabbitMQ's
``messages_details``.

RabbitMQ's UI asks for history (``lengths_age``/``msg_rates_age``... in the query) and draws its
charts from ``samples`` in each ``*_details``. Until the server keeps a real history, a request
that asks gets the samples this tracker has: the previous sample of the object and the one just
taken (``history``), newest first as RabbitMQ gives them, with their ``avg`` and ``avg_rate``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["CHURN", "QUEUE_STATS", "VHOST_STATS", "Key", "RateTracker", "queue_counts", "with_rates"]

# RabbitMQ's message_stats keys of a queue, in the order ``queue_counts`` gives them
QUEUE_STATS = ("publish", "deliver_get", "ack", "redeliver", "get", "get_no_ack", "deliver", "deliver_no_ack",
               "get_empty")
# and of a vhost (and the overview): the queues' plus what only channels and exchanges see
VHOST_STATS = ("publish", "confirm", "return_unroutable", "drop_unroutable", "get", "get_no_ack", "deliver",
               "deliver_no_ack", "redeliver", "ack", "deliver_get", "get_empty")
CHURN = ("connection_created", "connection_closed", "channel_created", "channel_closed", "queue_declared",
         "queue_created", "queue_deleted")
HALF_LIFE = 5.0  # seconds
MAX_TRACKED = 100_000  # bound on remembered samples (objects come and go)

Key = tuple[Any, ...]  # (kind, ...names)


def queue_counts(s: Any) -> tuple[int, ...]:
    """A queue's ``QueueStats`` as the ``QUEUE_STATS`` counts: ``delivered`` is every delivery and
    get; what is neither a get nor a no-ack delivery went to a consumer that acks."""
    deliver = s.delivered - s.got - s.got_no_ack - s.delivered_no_ack
    return (s.published, s.delivered, s.acked, s.redelivered, s.got, s.got_no_ack, deliver, s.delivered_no_ack,
            s.get_empty)


def with_rates(names: Sequence[str], counts: Sequence[int], rates: Sequence[float],
               history: Sequence[tuple[float, tuple[int, ...]]] | None = None) -> dict[str, Any]:
    """``{name: count, name_details: {"rate": r}}`` for each name, RabbitMQ's shape; with ``history``
    (newest first) each details also has RabbitMQ's ``samples``, ``avg`` and ``avg_rate``."""
    out: dict[str, Any] = {}
    for i, (name, count, rate) in enumerate(zip(names, counts, rates, strict=True)):
        out[name] = count
        details: dict[str, Any] = {"rate": rate}
        if history is not None:
            points = [(at, values[i]) for at, values in history if len(values) > i]
            details["samples"] = [{"sample": value, "timestamp": int(at * 1000)} for at, value in points]
            details["avg"] = round(sum(v for _, v in points) / len(points), 3) if points else 0.0
            span = points[0][0] - points[-1][0] if points else 0.0
            details["avg_rate"] = round((points[0][1] - points[-1][1]) / span, 3) if span > 0 else 0.0
        out[name + "_details"] = details
    return out


@dataclass(slots=True)
class _Sample:
    owner: object  # the object sampled (a new one under the same key starts afresh)
    at: float
    counts: tuple[int, ...]
    rates: list[float] = field(default_factory=list)
    prev_at: float | None = None  # the sample before (``history``)
    prev_counts: tuple[int, ...] = ()


class RateTracker:
    def __init__(self) -> None:
        self._samples: dict[Key, _Sample] = {}

    def sample(self, key: Key, owner: object, counts: tuple[int, ...], now: float, *,
               signed: bool = False) -> tuple[float, ...]:
        """Record ``counts`` at ``now``; the rate of each (per second)."""
        last = self._samples.get(key)
        if last is None or last.owner is not owner or len(last.counts) != len(counts):
            if len(self._samples) >= MAX_TRACKED:
                self._samples.clear()
            self._samples[key] = last = _Sample(owner, now, counts, [0.0] * len(counts))
        elif now > last.at:
            dt = now - last.at
            keep = math.exp(-dt * math.log(2) / HALF_LIFE)
            rates = last.rates
            for i, (old, new) in enumerate(zip(last.counts, counts, strict=True)):
                change = new - old if signed else max(0, new - old)  # a counter that went down: no traffic
                rates[i] = keep * rates[i] + (1 - keep) * change / dt
            last.prev_at, last.prev_counts = last.at, last.counts
            last.at, last.counts = now, counts
        return tuple(round(rate, 3) for rate in last.rates)

    def history(self, key: Key) -> list[tuple[float, tuple[int, ...]]]:
        """The samples kept of ``key``, newest first: (time, counts)."""
        last = self._samples.get(key)
        if last is None:
            return []
        out = [(last.at, last.counts)]
        if last.prev_at is not None:
            out.append((last.prev_at, last.prev_counts))
        return out

    def reset(self) -> None:
        """Forget every sample (``DELETE /api/reset``): rates start afresh from the next request."""
        self._samples.clear()

    def forget(self, kind: str, keep: set[Key]) -> None:
        """Drop the samples of ``kind`` whose objects are no longer there (not in ``keep``)."""
        for key in [k for k in self._samples if k[0] == kind and k not in keep]:
            del self._samples[key]
