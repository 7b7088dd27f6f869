"""``spark.readStream.format("headrace")``: a log (or a super stream's logs) as a Structured
Streaming source with admission control, a chosen start, and offsets in the query's checkpoint.

Offsets are log offsets, ``{"offset": next}`` for one log and ``{"offsets": {stream: next}}`` for a
super stream's partitions; Spark keeps them in the checkpoint's offsets log, so a query restarted
from its checkpoint resumes from the end of its last planned batch (re-running that batch, with the
same offsets, when its commit did not make it).

Admission control (Spark >= 4.2's ``latestOffset(start, limit)``): ``maxRecordsPerTrigger`` caps a
micro-batch's offsets, ``maxBytesPerTrigger`` its bytes of log, counted on the sparse index's
ranges (``_byte_cut``). Spark's Python API knows one ``ReadLimit`` at a time (no composite), so
``getDefaultReadLimit`` names records when both are given, and ``latestOffset`` applies whichever
options are set whenever Spark does not pass ``ReadAllAvailable`` (which it does for
``trigger(once=True)``, and which then reads everything, as the API asks).

``startingOffsets`` (``earliest``, ``latest`` or JSON ``{"<log>": offset}``, -2/-1 for
earliest/latest as Kafka's source takes them) or ``startingTimestamp`` (ms or ISO time: the first
record at or after it) choose where a new query starts; a query with a checkpoint ignores them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition

from .arrow_read import Bounds
from .sources import LogPartition, Source, _time_ms

try:  # Spark >= 4.1
    from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow
except ImportError:  # pragma: no cover - older Spark: plain stream reader
    SupportsTriggerAvailableNow = object  # type: ignore[assignment,misc]
try:  # Spark >= 4.2: admission control
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxBytes, ReadMaxRows
except ImportError:  # pragma: no cover - older Spark calls latestOffset() without a limit
    ReadLimit = ReadAllAvailable = ReadMaxBytes = ReadMaxRows = None  # type: ignore[assignment,misc]

__all__ = ["HeadraceStreamReader", "StartingPoint"]

EARLIEST, LATEST = -2, -1  # in startingOffsets' JSON, as Kafka's source


def _positive(options: Mapping[str, str], key: str) -> int | None:
    raw = options.get(key)
    if raw in (None, ""):
        return None
    try:
        value = int(str(raw))
    except ValueError:
        value = 0
    if value <= 0:
        raise ValueError(f"the headrace source's option '{key}' must be a positive integer, got {raw!r}")
    return value


class StartingPoint:
    """Where a new query starts, per log, from ``startingOffsets``/``startingTimestamp`` (or the older
    ``fromOffset``). ``moving``: the start depends on when it is asked (latest, a time)."""

    def __init__(self, options: Mapping[str, str], names: list[str], default: int) -> None:
        offsets, stamp = options.get("startingOffsets"), options.get("startingTimestamp")
        if offsets and stamp:
            raise ValueError("the headrace source takes 'startingOffsets' or 'startingTimestamp', not both")
        self.timestamp = _time_ms(stamp) if stamp else None
        self.per_log: dict[str, int] = {name: default for name in names}
        spec = (offsets or "").strip()
        if spec.lower() == "latest":
            self.per_log = {name: LATEST for name in names}
        elif spec and spec.lower() != "earliest":
            try:
                given = json.loads(spec)
            except ValueError:
                given = None
            if not isinstance(given, dict) or not all(isinstance(v, int) and v >= -2 for v in given.values()):
                raise ValueError(f"startingOffsets must be 'earliest', 'latest' or JSON like {{\"{names[0]}\": 42}} "
                                 f"(-2 earliest, -1 latest), got {spec!r}")
            unknown = sorted(set(given) - set(names))
            if unknown:
                raise ValueError(f"startingOffsets names {', '.join(unknown)}, not a log of this source "
                                 f"({', '.join(names)})")
            self.per_log.update({k: (0 if v == EARLIEST else v) for k, v in given.items()})
        self.moving = self.timestamp is not None or LATEST in self.per_log.values()

    def resolve(self, source: Source) -> dict[str, int]:
        if self.timestamp is not None:
            return {name: _first_at(source, name, self.timestamp) for name in source.names}
        latest = source.next_offsets() if LATEST in self.per_log.values() else {}
        return {name: latest[name] if n == LATEST else n for name, n in self.per_log.items()}


def _first_at(source: Source, name: str, stamp: int) -> int:
    """The offset of the log's first record stamped at or after ``stamp`` (its next offset if none):
    the index prunes to the range where it lies, and the range's rows give it exactly."""
    for partition in source.partitions({name: Bounds(from_ts=stamp)}):
        for batch in partition.batches():
            if batch.num_rows:
                return int(batch.column("offset")[0].as_py())
    return source.next_offsets()[name]


class HeadraceStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets are ``{"offset": next}`` for one log, ``{"offsets": {stream: next, ...}}`` for a
    super stream's partitions (each micro-batch reads every partition from its own offset)."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self.o = Source.parse(options)
        self.max_rows = _positive(options, "maxRecordsPerTrigger")
        self.max_bytes = _positive(options, "maxBytesPerTrigger")
        self.start = StartingPoint(options, self.o.names, self.o.bounds.from_offset or 0)
        self._target: dict[str, int] | None = None
        # a start that moves (latest, a time) is planned as an empty first batch: its end is then
        # this start, in the checkpoint, and a restart before it commits (which asks initialOffset
        # again, and gets a later start) loses nothing. Not with availableNow, which ends at an
        # empty batch: there a restart before the first commit resolves the start again.
        self._fresh: dict[str, Any] | None = None

    def _wrap(self, offsets: dict[str, int]) -> dict[str, Any]:
        return {"offsets": offsets} if self.o.super_stream is not None else {"offset": offsets[self.o.names[0]]}

    def _unwrap(self, offset: dict[str, Any]) -> dict[str, int]:
        if "offsets" in offset:
            return {name: int(offset["offsets"].get(name, 0)) for name in self.o.names}
        return {self.o.names[0]: int(offset["offset"])}

    def initialOffset(self) -> dict[str, Any]:
        offset = self._wrap(self.start.resolve(self.o))
        self._fresh = offset if self.start.moving else None
        return offset

    def getDefaultReadLimit(self) -> Any:
        if ReadLimit is None:  # pragma: no cover
            return None
        if self.max_rows is not None:
            return ReadMaxRows(self.max_rows)
        if self.max_bytes is not None:
            return ReadMaxBytes(self.max_bytes)
        return ReadAllAvailable()

    def latestOffset(self, start: dict[str, Any] | None = None, limit: Any = None) -> dict[str, Any]:
        if start is not None and start == self._fresh:
            self._fresh = None
            if self._target is None:  # availableNow ends at an empty batch: it plans the first one whole
                return start
        since = self._unwrap(start) if start else None
        latest = self.o.next_offsets(since)
        if self._target is not None:
            latest = {name: min(n, self._target.get(name, n)) for name, n in latest.items()}
        if since is None or limit is None or ReadAllAvailable is None or isinstance(limit, ReadAllAvailable):
            return self._wrap(latest)
        rows = limit.max_rows if isinstance(limit, ReadMaxRows) else self.max_rows
        size = limit.max_bytes if isinstance(limit, ReadMaxBytes) else self.max_bytes
        return self._wrap(self._admit(since, latest, rows, size))

    def _admit(self, since: dict[str, int], latest: dict[str, int], rows: int | None,
               size: int | None) -> dict[str, int]:
        """The next batch's end per log within the limits, shared by a super stream's logs: each log
        in turn takes what is left of them (a log at its end takes nothing)."""
        end = dict(since)
        for name in self.o.names:
            lo, hi = since.get(name, 0), latest[name]
            if hi <= lo or rows == 0 or size is not None and size <= 0:
                continue
            ranges = self._ranges(name, lo, hi, size)
            first = max(lo, ranges[0].first_offset) if ranges else hi  # retention may have dropped the start
            cut = hi if rows is None else min(hi, first + rows)
            if size is not None:
                cut, used = _byte_cut(ranges, first, cut, size)
                size -= used
            if rows is not None:
                rows -= max(0, cut - first)
            end[name] = cut
        return end

    def _ranges(self, name: str, lo: int, hi: int, size: int | None) -> list[Any]:
        """The log's ranges from ``lo`` to ``hi`` (exclusive), cut finely enough (an eighth of the
        byte limit, at least every index entry) for the byte limit to land close under its mark."""
        grain = max(1, size // 8) if size is not None else 1 << 40
        bounds = {"from_offset": lo, "to_offset": hi - 1}
        if self.o.remote is not None:
            return self.o.remote.ranges(self.o.kind, self.o.vhost, name, grain, **bounds)
        from headrace.persistence.mirror_log import read_ranges
        assert self.o.root is not None
        return read_ranges(self.o.root, self.o.vhost, name, target_bytes=grain, **bounds)

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self.o.next_offsets()

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        lo, hi = self._unwrap(start), self._unwrap(end)
        bounds = {name: Bounds(lo[name], hi[name] - 1) for name in self.o.names if hi[name] > lo[name]}
        return list(self.o.partitions(bounds)) if bounds else []

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, LogPartition)
        yield from partition.batches()

    def commit(self, end: dict[str, Any]) -> None:
        return None


def _byte_cut(ranges: list[Any], first: int, cut: int, size: int) -> tuple[int, int]:
    """(end offset, bytes taken): whole ranges from ``first`` while their bytes stay within ``size``,
    and never less than the first range, so a batch always moves on (as Spark's file source takes
    at least one file over ``maxBytesPerTrigger``)."""
    used = 0
    for i, r in enumerate(ranges):
        stop = cut if r.end_offset is None else min(cut, r.end_offset)
        if i and used + r.size > size:
            return max(first, min(cut, r.first_offset)), used
        used += r.size
        if stop >= cut:
            return cut, used
    return cut, used
