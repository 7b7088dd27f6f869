"""Export a mirrored exchange's log to Parquet or JSON with Spark."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pyspark.sql import functions as F

from headrace.persistence.tier_manifest import all_segments

from .datasource import MIN_PARTITION_BYTES, register
from .sources import Source

__all__ = ["export", "read_log", "split_bytes"]


RANGES_PER_CORE = 4


def split_bytes(spark: Any, data_dir: str | None, vhost: str, exchange: str | None, source: Mapping[str, str] | None = None) -> int:
    """Range size after Spark's file sources' split size: spark.sql.files.maxPartitionBytes, or less so
    that every core gets a few ranges (a slow range then does not hold up the whole job alone), not
    under openCostInBytes' 4 MiB. ``source``: the data source's options naming the logs instead."""
    total = Source.parse({**source, "vhost": vhost}).total_bytes() if source \
        else sum(s.size for s in all_segments(Path(str(data_dir)), vhost, str(exchange)))
    max_bytes = _bytes(spark.conf.get("spark.sql.files.maxPartitionBytes", "128m"))
    cores = max(1, int(spark.sparkContext.defaultParallelism))
    return min(max_bytes, max(MIN_PARTITION_BYTES, -(-total // (cores * RANGES_PER_CORE))))


def _bytes(value: str) -> int:
    value = value.strip().lower().removesuffix("b")
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    return int(value[:-1]) * units[value[-1]] if value and value[-1] in units else int(value)


def read_log(spark: Any, data_dir: str | None, exchange: str | None, *, vhost: str = "/", from_offset: int | None = None,
             to_offset: int | None = None, from_time: str | None = None, to_time: str | None = None,
             partition_bytes: int | None = None, source: Mapping[str, str] | None = None) -> Any:
    """The log as a DataFrame; ``partition_bytes`` (default: as Spark's file sources pick a split
    size, see ``split_bytes``) is about how much of it one task reads. ``source``, the data source's
    options that name the logs and where they are (``{"path": ..., "superStream": ...}``,
    ``{"url": ..., "user": ..., "exchange": ...}``), replaces ``data_dir`` and ``exchange``."""
    register(spark)
    options = dict(source) if source else {"path": str(data_dir), "exchange": str(exchange)}
    size = partition_bytes or split_bytes(spark, data_dir, vhost, exchange, source)
    reader = spark.read.format("headrace").options(**options).option("vhost", vhost) \
        .option("partitionBytes", str(size))
    for key, value in (("fromOffset", from_offset), ("toOffset", to_offset), ("fromTime", from_time),
                       ("toTime", to_time)):
        if value is not None:
            reader = reader.option(key, str(value))
    return reader.load()


def export(spark: Any, data_dir: str, exchange: str, *, out: str, fmt: str = "parquet", vhost: str = "/",
           partition_by: str | None = None, **filters: Any) -> int:
    if fmt not in ("parquet", "json"):
        raise ValueError(f"unsupported format {fmt!r} (parquet or json)")
    df = read_log(spark, data_dir, exchange, vhost=vhost, **filters)
    if fmt == "json":  # JSON has no binary type: bodies as base64 text
        df = df.withColumn("properties", F.base64("properties")).withColumn("body", F.base64("body"))
    if partition_by == "date":
        df = df.withColumn("date", F.to_date("timestamp"))
    elif partition_by not in (None, "routing_key"):
        raise ValueError("partition_by must be 'date' or 'routing_key'")
    writer = df.write.mode("overwrite")
    if partition_by is not None:
        writer = writer.partitionBy(partition_by)
    getattr(writer, fmt)(out)
    return int(df.count())
