"""Rate history of the management API: samples kept as RabbitMQ keeps them, and read in its shape.

Owner: ``History`` holds every series; only the sampler (``sampler.py``, the clock's tick) writes
it, through ``record`` and ``replace``; the HTTP handlers read it. Nothing here reads the clock: a
sample's time is the ``now`` its tick was given, a query's the request's.

A *series* is the counters and gauges of one object, e.g. a queue's nine message counters then its
three depths, under a key whose first element is the kind (``("queue", vhost, name)``); each
``*_details`` family the API shows is a run of its columns (``rates.py`` says where each starts). Each series
keeps one bounded ring per level of its *policy*, RabbitMQ's ``sample_retention_policies``: the
``global`` policy (overview, vhosts, node) keeps 605 s at 5 s, 3660 s at 60 s, 29400 s at 600 s and
a day at 1800 s; the ``basic`` policy (queues, exchanges, connections, channels) the first two. A
level's row is ``[grid time in ms, value...]`` in one ``array('q')``; the time is the sample's own,
rounded up to the level's interval, so a coarse row holds the newest sample of its interval (a
later sample in the same interval overwrites it, as RabbitMQ's slides keep one element per
interval). A row is stored only when its values differ from the row before: an idle object keeps
one row per level, and a reader carries the last row forward. A level holds at most
``max age / interval + 1`` rows; the oldest goes when a new one would pass that.

A query (``Range``: RabbitMQ's ``#range{first, last, incr}``, from ``*_age`` and ``*_incr``) is
answered from the finest level whose age covers it, on the grid ``first, first + incr, ...,
last``, as ``rabbit_mgmt_stats:format_range`` does: each point the value of the newest row at or
before it, zero before the object's first sample, newest first, with ``avg`` (the mean of the
samples) and ``avg_rate`` (newest minus oldest over their time apart), and ``rate`` from the last
two points. Without a range, ``rate`` is from the last two ticks of the finest level, as
RabbitMQ's instant rate is, and 0 until the object has two samples.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["MAX_RANGE", "UI_RANGES", "History", "Key", "Policy", "Range", "Series", "details"]

Key = tuple[Any, ...]  # (kind, ...names)
MAX_RANGE = 500  # points a query may ask for (RabbitMQ's ?MAX_RANGE): age / incr at most this
# the ranges RabbitMQ's UI offers (s); the overview reports each level's age as the largest of them
# it covers (605 s -> 600), as RabbitMQ's overview does
UI_RANGES = (60, 600, 3600, 28800, 86400)


@dataclass(frozen=True, slots=True)
class Policy:
    """Levels of (max age s, interval s), finest first (checked by the settings)."""
    levels: tuple[tuple[int, int], ...]
    # per level: (interval in ms, rows it keeps), what each record needs
    grids: tuple[tuple[int, int], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "grids", tuple((i * 1000, age // i + 1) for age, i in self.levels))

    def capacity(self, level: int) -> int:
        age, interval = self.levels[level]
        return age // interval + 1

    def level_for(self, age_ms: int) -> int:
        """The finest level whose age covers ``age_ms`` (RabbitMQ's select_range_sample), else the
        coarsest."""
        for i, (age, _) in enumerate(self.levels):
            if age * 1000 >= age_ms:
                return i
        return len(self.levels) - 1

    def reported(self) -> list[int]:
        """The ages the overview's ``sample_retention_policies`` lists."""
        return [max((r for r in UI_RANGES if r <= age), default=age) for age, _ in self.levels]


@dataclass(frozen=True, slots=True)
class Range:
    """One query's grid in ms: ``first`` to ``last`` by ``incr``."""
    first: int
    last: int
    incr: int


class Series:
    """One object's figures: its rows per level (module docstring)."""
    __slots__ = ("owner", "born", "dropped", "width", "levels")

    def __init__(self, owner: object, born: int, levels: int, width: int) -> None:
        self.owner = owner  # the object sampled: another one under the same key starts a new series
        self.born = born  # ms, the first sample's time
        self.dropped = 0  # bit per level: rows went for room (points before its first are unknown)
        self.width = width  # values per row
        self.levels = [array("q") for _ in range(levels)]

    def record(self, policy: Policy, at: int, values: Sequence[int]) -> None:
        """The values at ``at`` (ms) into each level."""
        width = len(values) + 1
        new = array("q", values)
        for i, (rows, (interval, keep)) in enumerate(zip(self.levels, policy.grids)):
            grid = -(-at // interval) * interval
            n = len(rows)
            if n:
                if rows[n - width] == grid:  # the level's interval in progress: its newest sample
                    rows[n - width + 1:] = new
                    continue
                if rows[n - width + 1:] == new:
                    continue  # unchanged: the last row carries forward
            rows.append(grid)
            rows.extend(new)
            if n >= keep * width:
                del rows[:width]
                self.dropped |= 1 << i

    def points(self, level: int, rng: Range) -> list[tuple[int, tuple[int, ...]]]:
        """(time ms, values) at each point of ``rng``, oldest first, from ``level``."""
        rows = self.levels[level]
        width = self.width
        w = width + 1
        times = rows[::w]
        out: list[tuple[int, tuple[int, ...]]] = []
        if not times:
            return out
        zero = (0,) * width
        first = tuple(rows[1:w])
        dropped = bool(self.dropped >> level & 1)
        j = -1  # the newest row at or before the point
        for t in range(rng.first, rng.last + 1, rng.incr):
            while j + 1 < len(times) and times[j + 1] <= t:
                j += 1
            if j >= 0:
                out.append((t, tuple(rows[j * w + 1:(j + 1) * w])))
            elif dropped:
                continue  # older than what the level keeps
            elif t < self.born:
                out.append((t, zero))  # before the object's first sample, as RabbitMQ pads
            else:
                out.append((t, first))  # sampled, but its row stands at the end of its interval
        return out

    def value_at(self, level: int, t: int) -> tuple[int, ...] | None:
        """The values at ``t`` (ms) on ``level``: its newest row at or before ``t``, or None."""
        rows = self.levels[level]
        w = self.width + 1
        for j in range(len(rows) - w, -1, -w):
            if rows[j] <= t:
                return tuple(rows[j + 1:j + w])
        return None


class History:
    """Every series, by key, with the policy of its kind and the last tick's time."""

    def __init__(self, global_policy: Policy, basic_policy: Policy) -> None:
        self.policies = {"global": global_policy, "basic": basic_policy}
        self.series: dict[Key, Series] = {}
        self.last_at = 0  # ms, the grid time of the newest tick (0: none yet)
        self.tick_ms = min(i for p in self.policies.values() for _, i in p.levels) * 1000

    def policy_of(self, key: Key) -> Policy:
        return self.policies["global" if key[0] in GLOBAL_KINDS else "basic"]

    def reset(self) -> None:
        """Forget every series (``DELETE /api/reset``): history starts again at the next tick."""
        self.series = {}

    def replace(self, series: dict[Key, Series], at: int) -> None:
        """The sampler's tick: the series of the objects that still exist, sampled at ``at``."""
        self.series = series
        self.last_at = at

    def record(self, fresh: dict[Key, Series], key: Key, owner: object, at: int, values: Sequence[int]) -> None:
        """Add ``values`` to ``key``'s series (a new one for a new owner) and keep it in ``fresh``."""
        series = self.series.get(key)
        policy = self.policy_of(key)
        if series is None or series.owner is not owner or series.width != len(values):
            series = Series(owner, at, len(policy.levels), len(values))
        series.record(policy, at, values)
        fresh[key] = series

    def details(self, keys: Iterable[Key], names: Sequence[str], counts: Sequence[int], rng: Range | None, *,
                signed: bool = False, column: int = 0) -> dict[str, Any]:
        """``{name: count, name_details: {...}}`` in RabbitMQ's shape: counts as they are now, rates
        (and with ``rng`` the samples) from the history of the series ``keys`` (summed: a user's
        overview over the vhosts they see), their columns from ``column`` on."""
        width = len(names)
        found = [(s, self.policy_of(k)) for k in keys if (s := self.series.get(k)) is not None]
        if not found and rng is not None:
            # figures with no history (an object newer than the last tick, the node's descriptors):
            # the current value at each point
            flat = [(t, tuple(counts)) for t in range(rng.last, rng.first - 1, -rng.incr)]
            return details(names, counts, [0.0] * width, flat)
        if rng is None:
            rates = self._instant(found, width, signed, column)
            return details(names, counts, rates, None)
        points: dict[int, list[int]] = {}
        for series, policy in found:
            for t, values in series.points(policy.level_for(rng.last - rng.first), rng):
                total = points.setdefault(t, [0] * width)
                for i, v in enumerate(values[column:column + width]):
                    total[i] += v
        ordered = sorted(points.items())
        rates = [0.0] * width
        if len(ordered) >= 2:
            (t0, v0), (t1, v1) = ordered[-2], ordered[-1]
            rates = [_rate(a, b, t1 - t0, signed) for a, b in zip(v0, v1, strict=True)]
        return details(names, counts, rates, ordered[::-1])

    def _instant(self, found: list[tuple[Series, Policy]], width: int, signed: bool, column: int) -> list[float]:
        """From the last two ticks of each series' finest level (0 for a series born since)."""
        rates = [0.0] * width
        for series, policy in found:
            interval = policy.levels[0][1] * 1000
            t1 = -(-self.last_at // interval) * interval
            t0 = t1 - interval
            if series.born > t0:
                continue
            v1, v0 = series.value_at(0, t1), series.value_at(0, t0)
            if v1 is None or v0 is None:
                continue
            for i, (a, b) in enumerate(zip(v0[column:column + width], v1[column:column + width], strict=True)):
                rates[i] += _rate(a, b, interval, signed)
        return rates


# kinds kept under the global policy (RabbitMQ: node and vhost statistics); the rest are basic
GLOBAL_KINDS = frozenset({"overview", "churn", "vhost", "node"})


def _rate(old: int, new: int, ms: int, signed: bool) -> float:
    change = new - old
    if not signed and change < 0:
        change = 0  # a counter that went down (its objects went): no traffic
    return round(change * 1000 / ms, 3) if ms > 0 else 0.0


def details(names: Sequence[str], counts: Sequence[int], rates: Sequence[float],
            samples: Sequence[tuple[int, Sequence[int]]] | None) -> dict[str, Any]:
    """RabbitMQ's ``name`` / ``name_details`` pairs; ``samples`` (newest first) adds its ``samples``,
    ``avg`` and ``avg_rate`` (the last two only for more than one sample, as RabbitMQ)."""
    out: dict[str, Any] = {}
    for i, (name, count, rate) in enumerate(zip(names, counts, rates, strict=True)):
        out[name] = count
        d: dict[str, Any] = {"rate": rate}
        if samples is not None:
            d["samples"] = [{"sample": values[i], "timestamp": t} for t, values in samples]
            if len(samples) > 1:
                (t_new, new), (t_old, old) = samples[0], samples[-1]
                d["avg_rate"] = round((new[i] - old[i]) * 1000 / (t_new - t_old), 3)
                d["avg"] = round(math.fsum(v[i] for _, v in samples) / len(samples), 3)
        out[name + "_details"] = d
    return out
