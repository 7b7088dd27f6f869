"""The ``headrace`` PySpark data source: batch and streaming reads of a mirrored exchange's log.

Input partitions are byte ranges of about ``partitionBytes`` cut at the segments' sparse-index
entries (``read_ranges``), so even a one-segment log spreads over every core; each is read as Arrow
record batches (``arrow_read``). The options ``fromOffset``/``toOffset``/``fromTime``/``toTime``/
``routingKey`` prune ranges and then filter every row exactly; with ``pushFilters=true`` the filters
Spark pushes down (``offset``/``timestamp`` comparisons, ``routing_key =``) do the same (see
``PushdownReader`` for why that is not the default). The streaming reader's offsets are log offsets (``{"offset": next}``), its micro-batches
go through the same ranges and batches, and it supports ``trigger(availableNow=True)``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)

from headrace.persistence.mirror_log import ReadRange, next_offset, read_ranges

from .arrow_read import SCHEMA, Bounds, range_batches, timestamp_ms

try:  # Spark >= 4.1
    from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow
except ImportError:  # pragma: no cover - older Spark: plain stream reader
    SupportsTriggerAvailableNow = object  # type: ignore[assignment,misc]

__all__ = ["DEFAULT_PARTITION_BYTES", "SCHEMA", "HeadraceDataSource", "register"]

# Range size when the caller gives none (``read_log`` derives one from the session as Spark's file
# sources do: maxPartitionBytes, or less so that every core gets a share).
DEFAULT_PARTITION_BYTES = 32 << 20
# Smallest range worth a task of its own (Spark's spark.sql.files.openCostInBytes).
MIN_PARTITION_BYTES = 4 << 20
STREAMS_DIR = "streams"  # persistence.stream_log.stream_root: stream queues' logs


def _time_ms(value: str | None) -> int | None:
    if value is None or value == "":
        return None
    if value.lstrip("-").isdigit():
        return int(value)
    stamp = datetime.fromisoformat(value)
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=timezone.utc)
    return int(stamp.timestamp() * 1000)


def _int(value: str | None) -> int | None:
    return int(value) if value not in (None, "") else None


class RangePartition(InputPartition):
    """Consecutive ranges read by one task: one range of a big segment, or several small segments
    packed together (as Spark packs small files), so a log of many small segments is not a task each."""

    def __init__(self, ranges: list[ReadRange], vhost: str, exchange: str, bounds: Bounds) -> None:
        super().__init__(ranges[0].path)
        self.ranges, self.vhost, self.exchange, self.bounds = ranges, vhost, exchange, bounds


def _tighter(current: int | None, new: int, *, lower: bool) -> int:
    if current is None:
        return new
    return max(current, new) if lower else min(current, new)


@dataclass(slots=True)
class _Options:
    path: str
    exchange: str
    vhost: str
    bounds: Bounds
    partition_bytes: int

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> _Options:
        path, exchange, stream = options.get("path"), options.get("exchange"), options.get("stream")
        if stream is not None and path:
            if exchange is not None:
                raise ValueError("the headrace source reads one log: give 'exchange' or 'stream', not both")
            # a stream queue's log has the mirror layout under <data dir>/streams
            path, exchange = str(Path(path) / STREAMS_DIR), stream
        if not path or exchange is None:
            raise ValueError("the headrace source needs the options 'path' (data dir) and 'exchange' or 'stream'")
        bounds = Bounds(_int(options.get("fromOffset")), _int(options.get("toOffset")),
                        _time_ms(options.get("fromTime")), _time_ms(options.get("toTime")),
                        options.get("routingKey") or None)
        size = _int(options.get("partitionBytes")) or DEFAULT_PARTITION_BYTES
        return cls(path, exchange, options.get("vhost", "/"), bounds, max(size, 1))

    def partitions(self, bounds: Bounds) -> list[InputPartition]:
        ranges = read_ranges(Path(self.path), self.vhost, self.exchange, target_bytes=self.partition_bytes,
                             from_offset=bounds.from_offset, to_offset=bounds.to_offset,
                             from_ts=bounds.from_ts, to_ts=bounds.to_ts)
        groups: list[list[ReadRange]] = []
        size = self.partition_bytes
        for r in ranges:
            if size + r.size > self.partition_bytes:
                groups.append([])
                size = 0
            groups[-1].append(r)
            size += r.size
        return [RangePartition(g, self.vhost, self.exchange, bounds) for g in groups]


def _read(partition: RangePartition) -> Iterator[Any]:
    for r in partition.ranges:
        yield from range_batches(r, partition.vhost, partition.exchange, partition.bounds)


class HeadraceReader(DataSourceReader):
    def __init__(self, options: Mapping[str, str]) -> None:
        self.o = _Options.parse(options)
        self.bounds = self.o.bounds

    def partitions(self) -> list[InputPartition]:
        return self.o.partitions(self.bounds) or [InputPartition(None)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        if isinstance(partition, RangePartition):
            yield from _read(partition)


class PushdownReader(HeadraceReader):
    """The reader with ``pushFilters``, chosen by the option ``pushFilters=true``. Not the default:
    Spark 4.1-4.3 keep the partitions planned at a query's pushdown on the DataFrame and reuse
    them for a later query on the same DataFrame that pushes no filter (``df.count()`` after
    ``df.filter(...).count()`` counts the filtered rows). Read a fresh DataFrame per query with it."""

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        """Takes ``offset`` and ``timestamp`` comparisons and ``routing_key = '...'``, and hands
        back the rest for Spark to evaluate."""
        b = self.bounds
        for f in filters:
            column = f.attribute if isinstance(f, (EqualTo, GreaterThan, GreaterThanOrEqual, LessThan,
                                                   LessThanOrEqual)) else None
            value = getattr(f, "value", None)
            if column == ("offset",) and isinstance(value, int) and not isinstance(value, bool):
                if isinstance(f, EqualTo):
                    b = replace(b, from_offset=_tighter(b.from_offset, value, lower=True),
                                to_offset=_tighter(b.to_offset, value, lower=False))
                elif isinstance(f, (GreaterThan, GreaterThanOrEqual)):
                    b = replace(b, from_offset=_tighter(b.from_offset, value + isinstance(f, GreaterThan),
                                                        lower=True))
                else:
                    b = replace(b, to_offset=_tighter(b.to_offset, value - isinstance(f, LessThan), lower=False))
            elif column == ("timestamp",) and isinstance(value, datetime) and not isinstance(f, EqualTo):
                if isinstance(f, GreaterThanOrEqual):
                    b = replace(b, from_ts=_tighter(b.from_ts, timestamp_ms(value, ceil=True), lower=True))
                elif isinstance(f, GreaterThan):
                    b = replace(b, from_ts=_tighter(b.from_ts, timestamp_ms(value, ceil=False) + 1, lower=True))
                elif isinstance(f, LessThanOrEqual):
                    b = replace(b, to_ts=_tighter(b.to_ts, timestamp_ms(value, ceil=False), lower=False))
                else:
                    b = replace(b, to_ts=_tighter(b.to_ts, timestamp_ms(value, ceil=True) - 1, lower=False))
            elif column == ("routing_key",) and isinstance(f, EqualTo) and isinstance(value, str) \
                    and b.routing_key in (None, value):
                b = replace(b, routing_key=value)
            else:
                yield f
        self.bounds = b


class HeadraceStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: Mapping[str, str]) -> None:
        self.o = _Options.parse(options)
        self._target: int | None = None

    def _next(self) -> int:
        return next_offset(Path(self.o.path), self.o.vhost, self.o.exchange)

    def initialOffset(self) -> dict[str, int]:
        return {"offset": self.o.bounds.from_offset or 0}

    def latestOffset(self, start: dict[str, int] | None = None, limit: Any = None) -> dict[str, int]:
        latest = self._next()
        if self._target is not None:
            latest = min(latest, self._target)
        return {"offset": latest}

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._next()

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
        lo, hi = start["offset"], end["offset"] - 1
        if hi < lo:
            return []
        return self.o.partitions(Bounds(lo, hi))

    def read(self, partition: InputPartition) -> Iterator[Any]:
        yield from _read(partition)  # type: ignore[arg-type]

    def commit(self, end: dict[str, int]) -> None:
        return None


class HeadraceDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "headrace"

    def schema(self) -> Any:
        return SCHEMA

    def reader(self, schema: Any) -> DataSourceReader:
        if str(self.options.get("pushFilters", "false")).lower() == "true":
            return PushdownReader(self.options)
        return HeadraceReader(self.options)

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return HeadraceStreamReader(self.options)


def register(spark: Any) -> None:
    """Registers the source on ``spark``. Python workers run the current interpreter unless the
    user chose one (PYSPARK_PYTHON), since they must import headrace; and the session's Python
    filter pushdown is switched on, which Spark requires of a source that takes filters."""
    if not os.environ.get("PYSPARK_PYTHON"):
        os.environ["PYSPARK_PYTHON"] = sys.executable
        spark.sparkContext.pythonExec = sys.executable
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    spark.dataSource.register(HeadraceDataSource)
