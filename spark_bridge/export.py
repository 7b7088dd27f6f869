"""Export a mirrored exchange's log to Parquet or JSON with Spark."""

from __future__ import annotations

from typing import Any

from pyspark.sql import functions as F

from .datasource import register

__all__ = ["export", "read_log"]


def read_log(spark: Any, data_dir: str, exchange: str, *, vhost: str = "/", from_offset: int | None = None,
             to_offset: int | None = None, from_time: str | None = None, to_time: str | None = None) -> Any:
    register(spark)
    reader = spark.read.format("headrace").option("path", str(data_dir)).option("exchange", exchange) \
        .option("vhost", vhost)
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
