"""Message rates for the management API (RabbitMQ's ``*_details: {"rate": msg/s}``).

Rates come from the queues' counters, sampled whenever the API renders them, with the time the
shell stamped on the request (``ctx.now``): no clock reads here. Each rate is a decaying average
of the rates between samples, weighted by elapsed time (about ``HALF_LIFE`` seconds of memory), so
a burst shows right away and fades once traffic stops.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

__all__ = ["FIELDS", "RateTracker"]

# counter name on QueueStats -> RabbitMQ's message_stats key
FIELDS = (("published", "publish"), ("delivered", "deliver_get"), ("acked", "ack"), ("redelivered", "redeliver"))
HALF_LIFE = 5.0  # seconds
MAX_TRACKED = 100_000  # bound on remembered samples (queues come and go)


@dataclass(slots=True)
class _Sample:
    owner: object  # the queue sampled (a new queue of the same name starts afresh)
    at: float
    counts: tuple[int, ...]
    rates: list[float] = field(default_factory=lambda: [0.0] * len(FIELDS))


class RateTracker:
    def __init__(self) -> None:
        self._samples: dict[tuple[str, str], _Sample] = {}

    def sample(self, key: tuple[str, str], owner: object, counts: tuple[int, ...], now: float) -> dict[str, float]:
        """Record ``counts`` at ``now``; the rates (msg/s) per message_stats key."""
        last = self._samples.get(key)
        if last is None or last.owner is not owner:
            if len(self._samples) >= MAX_TRACKED:
                self._samples.clear()
            self._samples[key] = last = _Sample(owner, now, counts)
        elif now > last.at:
            dt = now - last.at
            keep = math.exp(-dt * math.log(2) / HALF_LIFE)
            for i, (old, new) in enumerate(zip(last.counts, counts, strict=True)):
                instant = max(0, new - old) / dt  # a counter that went down (queue deleted) is no traffic
                last.rates[i] = keep * last.rates[i] + (1 - keep) * instant
            last.at, last.counts = now, counts
        return {name: round(rate, 3) for (_, name), rate in zip(FIELDS, last.rates, strict=True)}

    def forget(self, keep: set[tuple[str, str]]) -> None:
        """Drop samples of queues no longer there."""
        for key in [k for k in self._samples if k not in keep and k[0] != ""]:
            del self._samples[key]
