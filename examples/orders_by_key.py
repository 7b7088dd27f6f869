"""A Spark job for a cluster: a mirrored exchange's log read over the broker's HTTP API, messages and
body bytes per routing key, written as Parquet. Run it with spark-submit (README.md, docs/spark.md):

    spark-submit --master spark://HOST:7077 examples/orders_by_key.py --url http://broker:15672 \
        --exchange orders --out /shared/orders-by-key

``body_crc`` (the sum of the bodies' CRC-32s) lets a reader check that two reads saw the same bodies.
"""

from __future__ import annotations

import argparse

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from headrace.spark_bridge.datasource import register


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--url", required=True, help="the broker's HTTP API, e.g. http://broker:15672")
    p.add_argument("--user", default="guest")
    p.add_argument("--password", default="guest")
    p.add_argument("--vhost", default="/")
    p.add_argument("--exchange", required=True, help="a mirrored exchange")
    p.add_argument("--out", required=True, help="the Parquet output directory (replaced)")
    p.add_argument("--partition-bytes", type=int, help="bytes of log per read task (default 32 MiB)")
    args = p.parse_args()

    spark = SparkSession.builder.appName("orders-by-key").getOrCreate()
    register(spark)
    reader = spark.read.format("headrace").option("url", args.url).option("user", args.user) \
        .option("password", args.password).option("vhost", args.vhost).option("exchange", args.exchange)
    if args.partition_bytes:
        reader = reader.option("partitionBytes", str(args.partition_bytes))
    by_key = reader.load().groupBy("routing_key").agg(
        F.count("*").alias("messages"), F.sum(F.length("body")).alias("body_bytes"),
        F.sum(F.crc32("body")).alias("body_crc"))
    by_key.write.mode("overwrite").parquet(args.out)
    written = spark.read.parquet(args.out).agg(F.count("*"), F.sum("messages")).first()
    print(f"wrote {written[0]} routing keys, {written[1]} messages to {args.out}")
    spark.stop()


if __name__ == "__main__":
    main()
