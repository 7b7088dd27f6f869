"""The ``headrace`` PySpark data source: batch and streaming reads of a mirrored exchange's, a
stream's or a super stream's log, from the broker's data directory or over its HTTP API
(``sources.py`` says which options name what).

Input partitions are byte ranges of about ``partitionBytes`` cut at the segments' sparse-index
entries (``read_ranges``), so even a one-segment log spreads over every core; each is read as Arrow
record batches (``arrow_read``). The options ``fromOffset``/``toOffset``/``fromTime``/``toTime``/
``routingKey`` prune ranges and then filter every row exactly; with ``pushFilters=true`` the filters
Spark pushes down (``offset``/``timestamp`` comparisons, ``routing_key =``) do the same (see
``PushdownReader`` for why that is not the default). The streaming reader's offsets are log offsets,
its micro-batches go through the same ranges and batches (``stream_reader.py``: admission control,
starting offsets); ``writeStream.format("headrace")`` publishes micro-batches into an exchange
exactly once (``stream_sink.py``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)

from .arrow_read import SCHEMA, Bounds, timestamp_ms
from .sources import DEFAULT_PARTITION_BYTES, MIN_PARTITION_BYTES, LogPartition, Source
from .stream_reader import HeadraceStreamReader
from .stream_sink import HeadraceStreamWriter

__all__ = ["DEFAULT_PARTITION_BYTES", "MIN_PARTITION_BYTES", "SCHEMA", "HeadraceDataSource", "register"]


def _tighter(current: int | None, new: int, *, lower: bool) -> int:
    if current is None:
        return new
    return max(current, new) if lower else min(current, new)


class HeadraceReader(DataSourceReader):
    def __init__(self, options: Mapping[str, str]) -> None:
        self.o = Source.parse(options)
        self.bounds = self.o.bounds

    def partitions(self) -> list[InputPartition]:
        return list(self.o.partitions(self.bounds)) or [InputPartition(None)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        if isinstance(partition, LogPartition):
            yield from partition.batches()


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

    def streamWriter(self, schema: Any, overwrite: bool) -> DataSourceStreamWriter:
        return HeadraceStreamWriter(self.options, schema)


def register(spark: Any) -> None:
    """Registers the source on ``spark``. Python workers run the current interpreter unless the
    user chose one (PYSPARK_PYTHON), since they must import headrace; and the session's Python
    filter pushdown is switched on, which Spark requires of a source that takes filters."""
    if not os.environ.get("PYSPARK_PYTHON"):
        os.environ["PYSPARK_PYTHON"] = sys.executable
        spark.sparkContext.pythonExec = sys.executable
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    spark.dataSource.register(HeadraceDataSource)
