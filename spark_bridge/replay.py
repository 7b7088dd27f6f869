"""Replay a mirrored exchange's log back into a broker through AMQP, with Spark.

Spark reads and filters the log, groups rows by routing key (hash-partitioned, sorted by offset
inside each partition) so the original order holds per routing key while partitions publish in
parallel. Each partition publishes through its own connection with a window of publisher confirms
in flight (``ConfirmPublisher``, ``window`` per partition).

Exactly once comes from the broker: every message carries ``x-deduplication-header:
<exchange>:<offset>`` (and ``x-replayed-from``, the same value), and the target exchange is to be
declared with ``x-message-deduplication: true`` and an ``x-cache-size`` of at least ``window`` x
``partitions``. Progress per routing key is the highest offset below which every publish is
confirmed, saved once per batch of confirms (one file per partition, ``part-<n>.json``); a re-run
skips what was saved and re-sends at most the window that was in flight, which the broker then
drops as duplicates. By default progress lives under ``<data dir>/replay-progress/<job>``,
``<job>`` a hash of every job parameter (source exchange and vhost, target exchange and broker,
routing-key pattern, from/to bounds): a replay with other parameters starts afresh instead of
skipping what another job published.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from .amqp_publisher import ConfirmPublisher, with_headers
from .export import read_log

__all__ = ["DEFAULT_DEDUP_HEADER", "DEFAULT_WINDOW", "job_id", "load_progress", "replay", "topic_matches"]

# confirms in flight per partition: enough to keep a local broker busy between two group commits
DEFAULT_WINDOW = 1000
# the header a target exchange's dedup window reads by default (LavinMQ's x-deduplication-header)
DEFAULT_DEDUP_HEADER = "x-deduplication-header"


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


def load_progress(progress_dir: str) -> dict[str, int]:
    """Confirmed offset per routing key, merged over every partition's file (the highest wins)."""
    done: dict[str, int] = {}
    for path in Path(progress_dir).glob("part-*.json"):
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        for rk, offset in doc.get("offsets", {}).items():
            if offset > done.get(rk, -1):
                done[rk] = offset
    return done


def _save(progress_dir: str, partition: int, offsets: dict[str, int]) -> None:
    path = Path(progress_dir) / f"part-{partition}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"offsets": offsets}))
    os.replace(tmp, path)


def job_id(*, exchange: str, vhost: str, to_exchange: str, amqp_url: str, routing_key_pattern: str | None,
           filters: dict[str, Any]) -> str:
    """Names a replay job by everything that decides what it publishes where (credentials aside)."""
    target = urlsplit(amqp_url)
    doc = {"exchange": exchange, "vhost": vhost, "to_exchange": to_exchange,
           "broker": f"{target.scheme}://{target.hostname}:{target.port}{target.path}",
           "routing_key": routing_key_pattern, "filters": {k: str(v) for k, v in filters.items() if v is not None}}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:20]


def _publish_partition(rows: Iterator[Any], *, partition: int, amqp_url: str, exchange: str,
                       to_exchange: str, progress_dir: str, rate: float | None, pattern: str | None,
                       window: int, dedup_header: str) -> int:
    done = load_progress(progress_dir)
    saved: dict[str, int] = {}  # what this partition's file holds: every key it saw, at least as loaded
    pending: deque[tuple[int, str, int]] = deque()  # (tag, routing key, offset), in publish order
    matches: dict[str, bool] = {}
    pub: ConfirmPublisher | None = None
    published = 0
    start = time.monotonic()

    def confirmed(tag: int) -> None:
        while pending and pending[0][0] <= tag:
            _, rk, offset = pending.popleft()
            saved[rk] = offset
        _save(progress_dir, partition, saved)

    try:
        for offset, rk, props_raw, body in rows:
            if pattern is not None:
                ok = matches.get(rk)
                if ok is None:
                    ok = matches[rk] = topic_matches(pattern, rk)
                if not ok:
                    continue
            if rk not in saved:
                saved[rk] = done.get(rk, -1)
            if offset <= done.get(rk, -1):
                continue  # confirmed by an earlier run
            if pub is None:
                pub = ConfirmPublisher(amqp_url, window=window).connect()
                pub.on_confirmed = confirmed
            if rate:
                delay = start + published / rate - time.monotonic()
                if delay > 0:
                    pub.wait_confirms()  # a paced replay keeps its progress current
                    time.sleep(delay)
            key = f"{exchange}:{offset}"
            tag = pub.publish(to_exchange, rk, with_headers(bytes(props_raw or b""), {
                "x-replayed-from": key, dedup_header: key}), bytes(body or b""))
            pending.append((tag, rk, offset))
            published += 1
        if pub is not None:
            pub.wait_confirms()
        _save(progress_dir, partition, saved)
    finally:
        if pub is not None:
            pub.close()
    return published


def replay(spark: Any, data_dir: str, exchange: str, *, amqp_url: str, vhost: str = "/",
           to_exchange: str | None = None, routing_key_pattern: str | None = None, rate: float | None = None,
           progress_dir: str | None = None, partitions: int = 4, window: int = DEFAULT_WINDOW,
           dedup_header: str = DEFAULT_DEDUP_HEADER, **filters: Any) -> int:
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
    per_partition_rate = None
    if rate or routing_key_pattern is not None:
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

    def run(index: int, rows: Iterator[Any]) -> Iterator[int]:
        yield _publish_partition(rows, partition=index, amqp_url=amqp_url, exchange=exchange, to_exchange=target,
                                 progress_dir=progress, rate=per_partition_rate, pattern=routing_key_pattern,
                                 window=window, dedup_header=dedup_header)

    return int(sum(ordered.rdd.mapPartitionsWithIndex(run).collect()))
