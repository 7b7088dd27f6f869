"""Replay a mirrored exchange's log back into a broker through AMQP, with Spark.

Spark reads and filters the log, groups rows by routing key (hash-partitioned, sorted by offset
inside each partition) so the original order holds per routing key while partitions publish in
parallel. Each partition publishes with pika and publisher confirms; every message carries
``x-replayed-from: <exchange>:<offset>``. Progress is the last confirmed offset per routing key,
saved atomically right after each confirm, before the next publish; a re-run skips what was
confirmed, so a replay killed at any point resumes without duplicates (the only window is between
a confirm arriving and its save, microseconds). By default progress lives under
``<data dir>/replay-progress/<job>``, ``<job>`` a hash of every job parameter (source exchange and
vhost, target exchange and broker, routing-key pattern, from/to bounds): a replay with other
parameters starts afresh instead of skipping what another job published.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from .export import read_log

__all__ = ["job_id", "replay", "topic_matches"]


def topic_matches(pattern: str, routing_key: str) -> bool:
    """RabbitMQ's topic rules: ``*`` one word, ``#`` zero or more, empty key = zero words."""
    p = pattern.split(".") if pattern else []
    k = routing_key.split(".") if routing_key else []

    def match(i: int, j: int) -> bool:
        if i == len(p):
            return j == len(k)
        if p[i] == "#":
            return any(match(i + 1, jj) for jj in range(j, len(k) + 1))
        return j < len(k) and (p[i] == "*" or p[i] == k[j]) and match(i + 1, j + 1)

    return match(0, 0)


def _progress_file(progress_dir: str, routing_key: str) -> Path:
    return Path(progress_dir) / ("rk-" + hashlib.sha1(routing_key.encode()).hexdigest() + ".json")


def _load(progress_dir: str, routing_key: str) -> int:
    try:
        return int(json.loads(_progress_file(progress_dir, routing_key).read_text())["offset"])
    except (OSError, ValueError, KeyError):
        return -1


def _save(progress_dir: str, routing_key: str, offset: int) -> None:
    path = _progress_file(progress_dir, routing_key)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"routing_key": routing_key, "offset": offset}))
    os.replace(tmp, path)


def job_id(*, exchange: str, vhost: str, to_exchange: str, amqp_url: str, routing_key_pattern: str | None,
           filters: dict[str, Any]) -> str:
    """Names a replay job by everything that decides what it publishes where (credentials aside)."""
    target = urlsplit(amqp_url)
    doc = {"exchange": exchange, "vhost": vhost, "to_exchange": to_exchange,
           "broker": f"{target.scheme}://{target.hostname}:{target.port}{target.path}",
           "routing_key": routing_key_pattern, "filters": {k: str(v) for k, v in filters.items() if v is not None}}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:20]


def _publish_partition(rows: Iterator[Any], *, amqp_url: str, exchange: str, to_exchange: str,
                       progress_dir: str, rate: float | None, pattern: str | None) -> Iterator[int]:
    import pika

    conn = None
    published = 0
    done: dict[str, int] = {}
    start = time.monotonic()
    try:
        for row in rows:
            rk = row.routing_key
            if pattern is not None and not topic_matches(pattern, rk):
                continue
            if rk not in done:
                done[rk] = _load(progress_dir, rk)
            if row.offset <= done[rk]:
                continue  # confirmed by an earlier run
            if conn is None:
                conn = pika.BlockingConnection(pika.URLParameters(amqp_url))
                ch = conn.channel()
                ch.confirm_delivery()
            props = pika.spec.BasicProperties()
            if row.properties:
                props.decode(bytes(row.properties))
            headers = dict(props.headers or {})
            headers["x-replayed-from"] = f"{exchange}:{row.offset}"
            props.headers = headers
            if rate:
                delay = start + published / rate - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
            ch.basic_publish(to_exchange, rk, bytes(row.body), props)  # returns once confirmed
            _save(progress_dir, rk, row.offset)  # before the next publish: progress is exact
            published += 1
            done[rk] = row.offset
    finally:
        if conn is not None and conn.is_open:
            conn.close()
    yield published


def replay(spark: Any, data_dir: str, exchange: str, *, amqp_url: str, vhost: str = "/",
           to_exchange: str | None = None, routing_key_pattern: str | None = None, rate: float | None = None,
           progress_dir: str | None = None, partitions: int = 4, **filters: Any) -> int:
    from pyspark.sql import functions as F

    df = read_log(spark, data_dir, exchange, vhost=vhost, **filters)
    target = exchange if to_exchange is None else to_exchange
    if progress_dir is None:
        job = job_id(exchange=exchange, vhost=vhost, to_exchange=target, amqp_url=amqp_url,
                     routing_key_pattern=routing_key_pattern, filters=filters)
        progress = str(Path(data_dir) / "replay-progress" / job)
        Path(progress).mkdir(parents=True, exist_ok=True)
        (Path(progress) / "job.json").write_text(json.dumps(
            {"exchange": exchange, "vhost": vhost, "to_exchange": target, "routing_key": routing_key_pattern,
             "filters": {k: str(v) for k, v in filters.items()}}))
    else:
        progress = progress_dir
        Path(progress).mkdir(parents=True, exist_ok=True)
    # Which partition each matching routing key hashes to (Spark's hash partitioning is
    # pmod(murmur3, n)): --rate is shared by the partitions that have rows, not by all of them.
    keys = df.select("routing_key").distinct() \
        .withColumn("p", F.pmod(F.hash("routing_key"), F.lit(partitions))).collect()
    keys = [k for k in keys if routing_key_pattern is None or topic_matches(routing_key_pattern, k.routing_key)]
    if not keys:
        return 0
    if routing_key_pattern is not None:
        df = df.filter(F.col("routing_key").isin([k.routing_key for k in keys]))
    per_partition_rate = rate / len({k.p for k in keys}) if rate else None
    ordered = df.select("offset", "routing_key", "properties", "body").repartition(partitions, "routing_key") \
        .sortWithinPartitions("offset")

    def run(rows: Iterator[Any]) -> Iterator[int]:
        return _publish_partition(rows, amqp_url=amqp_url, exchange=exchange, to_exchange=target,
                                  progress_dir=progress, rate=per_partition_rate, pattern=routing_key_pattern)

    return int(sum(ordered.rdd.mapPartitions(run).collect()))
