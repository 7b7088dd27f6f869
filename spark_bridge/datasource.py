"""The ``headrace`` PySpark data source: batch and streaming reads of a mirrored exchange's log.

One input partition per segment file, so a large log is read in parallel; offsets and times filter
within segments through the sparse index. The streaming reader's offsets are log offsets
(``{"offset": next}``) and it supports ``trigger(availableNow=True)``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition

from headrace.persistence.mirror_log import list_segments, read_entries

try:  # Spark >= 4.1
    from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow
except ImportError:  # pragma: no cover - older Spark: plain stream reader
    SupportsTriggerAvailableNow = object  # type: ignore[assignment,misc]

__all__ = ["SCHEMA", "HeadraceDataSource", "register"]

SCHEMA = ("offset long, timestamp timestamp, vhost string, exchange string, routing_key string, "
          "headers map<string,string>, content_type string, message_id string, properties binary, body binary")


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


@dataclass
class SegmentPartition(InputPartition):
    path: str
    vhost: str
    exchange: str
    from_offset: int | None
    to_offset: int | None
    from_ts: int | None
    to_ts: int | None

    def __init__(self, path: str, vhost: str, exchange: str, from_offset: int | None, to_offset: int | None,
                 from_ts: int | None, to_ts: int | None) -> None:
        super().__init__(path)
        self.path, self.vhost, self.exchange = path, vhost, exchange
        self.from_offset, self.to_offset, self.from_ts, self.to_ts = from_offset, to_offset, from_ts, to_ts


def _rows(p: SegmentPartition) -> Iterator[tuple[Any, ...]]:
    for e in read_entries(Path(p.path), vhost=p.vhost, exchange=p.exchange, from_offset=p.from_offset,
                          to_offset=p.to_offset, from_ts=p.from_ts, to_ts=p.to_ts):
        yield (e.offset, datetime.fromtimestamp(e.timestamp_ms / 1000, timezone.utc), e.vhost, e.exchange,
               e.routing_key, e.headers, e.content_type, e.message_id, bytearray(e.props_raw), bytearray(e.body))


class _Options:
    def __init__(self, options: dict[str, str]) -> None:
        self.path = options.get("path")
        self.exchange = options.get("exchange")
        if not self.path or self.exchange is None:
            raise ValueError("the headrace source needs the options 'path' (data dir) and 'exchange'")
        self.vhost = options.get("vhost", "/")
        self.from_offset = _int(options.get("fromOffset"))
        self.to_offset = _int(options.get("toOffset"))
        self.from_ts = _time_ms(options.get("fromTime"))
        self.to_ts = _time_ms(options.get("toTime"))

    def segments(self) -> list[Any]:
        return list_segments(Path(self.path), self.vhost, self.exchange)  # type: ignore[arg-type]


class HeadraceReader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.o = _Options(options)

    def partitions(self) -> list[InputPartition]:
        o = self.o
        segs = o.segments()
        parts = []
        for i, seg in enumerate(segs):
            next_base = segs[i + 1].base_offset if i + 1 < len(segs) else None
            if o.to_offset is not None and seg.base_offset > o.to_offset:
                continue
            if o.from_offset is not None and next_base is not None and next_base <= o.from_offset:
                continue
            parts.append(SegmentPartition(str(seg.path), o.vhost, o.exchange, o.from_offset, o.to_offset,
                                          o.from_ts, o.to_ts))
        return parts or [SegmentPartition("", o.vhost, o.exchange, None, None, None, None)]

    def read(self, partition: SegmentPartition) -> Iterator[tuple[Any, ...]]:  # type: ignore[override]
        if partition.path:
            yield from _rows(partition)


def _next_offset(o: _Options) -> int:
    segs = o.segments()
    if not segs:
        return 0
    last = None
    for e in read_entries(segs[-1].path, vhost=o.vhost, exchange=o.exchange):
        last = e.offset
    return (last + 1) if last is not None else segs[-1].base_offset


class HeadraceStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):  # type: ignore[misc]
    def __init__(self, options: dict[str, str]) -> None:
        self.o = _Options(options)
        self._target: int | None = None

    def initialOffset(self) -> dict[str, int]:
        return {"offset": self.o.from_offset or 0}

    def latestOffset(self, start: dict[str, int] | None = None, limit: Any = None) -> dict[str, int]:
        latest = _next_offset(self.o)
        if self._target is not None:
            latest = min(latest, self._target)
        return {"offset": latest}

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = _next_offset(self.o)

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
        lo, hi = start["offset"], end["offset"] - 1
        if hi < lo:
            return []
        segs = self.o.segments()
        parts = []
        for i, seg in enumerate(segs):
            next_base = segs[i + 1].base_offset if i + 1 < len(segs) else None
            if seg.base_offset > hi or (next_base is not None and next_base <= lo):
                continue
            parts.append(SegmentPartition(str(seg.path), self.o.vhost, self.o.exchange, lo, hi, None, None))
        return parts

    def read(self, partition: SegmentPartition) -> Iterator[tuple[Any, ...]]:  # type: ignore[override]
        yield from _rows(partition)

    def commit(self, end: dict[str, int]) -> None:
        return None


class HeadraceDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "headrace"

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema: Any) -> DataSourceReader:
        return HeadraceReader(self.options)

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return HeadraceStreamReader(self.options)


def register(spark: Any) -> None:
    spark.dataSource.register(HeadraceDataSource)
