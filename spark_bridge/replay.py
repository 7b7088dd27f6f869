"""Replay a mirrored exchange's log back into a broker through AMQP, with Spark.

Spark reads and filters the log, groups rows by routing key (hash-partitioned, sorted by offset
inside each partition) so the original order holds per routing key while partitions publish in
parallel. Each partition publishes with pika and publisher confirms; every message carries
``x-replayed-from: <exchange>:<offset>``. Progress is the last confirmed offset per routing key,
saved atomically under ``progress_dir``; a re-run skips what was confirmed, so an interrupted replay
resumes without duplicates.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .export import read_log

__all__ = ["replay", "topic_matches"]

SAVE_EVERY = 100  # confirmed messages between progress saves (and always at the end)


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


def _publish_partition(rows: Iterator[Any], *, amqp_url: str, exchange: str, to_exchange: str,
                       progress_dir: str, rate: float | None, pattern: str | None) -> Iterator[int]:
    import pika

    conn = None
    published = 0
    done: dict[str, int] = {}
    dirty: dict[str, int] = {}
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
            ch.basic_publish(to_exchange, rk, bytes(row.body), props)
            published += 1
            done[rk] = row.offset
            dirty[rk] = row.offset
            if published % SAVE_EVERY == 0:
                for key, offset in dirty.items():
                    _save(progress_dir, key, offset)
                dirty.clear()
    finally:
        for key, offset in dirty.items():
            _save(progress_dir, key, offset)
        if conn is not None and conn.is_open:
            conn.close()
    yield published


def replay(spark: Any, data_dir: str, exchange: str, *, amqp_url: str, vhost: str = "/",
           to_exchange: str | None = None, routing_key_pattern: str | None = None, rate: float | None = None,
           progress_dir: str | None = None, partitions: int = 4, **filters: Any) -> int:
    df = read_log(spark, data_dir, exchange, vhost=vhost, **filters)
    progress = progress_dir or str(Path(data_dir) / "replay-progress" / exchange)
    Path(progress).mkdir(parents=True, exist_ok=True)
    target = exchange if to_exchange is None else to_exchange
    per_partition_rate = rate / partitions if rate else None
    ordered = df.select("offset", "routing_key", "properties", "body").repartition(partitions, "routing_key") \
        .sortWithinPartitions("offset")

    def run(rows: Iterator[Any]) -> Iterator[int]:
        return _publish_partition(rows, amqp_url=amqp_url, exchange=exchange, to_exchange=target,
                                  progress_dir=progress, rate=per_partition_rate, pattern=routing_key_pattern)

    return int(sum(ordered.rdd.mapPartitions(run).collect()))
