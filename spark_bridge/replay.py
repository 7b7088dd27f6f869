"""Replay a mirrored exchange's log back into a broker through AMQP, with Spark.

Spark reads and filters the log, groups rows by routing key (hash-partitioned, sorted by offset
inside each partition) so the original order holds per routing key while partitions publish in
parallel. The partitions are written to the ``headrace-replay`` sink (``replay_sink``): each task
gets its rows as Arrow batches and publishes them through its own connection, encoded in bulk, with
a window of publisher confirms in flight (``window`` per partition).

Exactly once comes from the broker: every message carries ``x-deduplication-header:
<exchange>:<offset>`` (and ``x-replayed-from``, the same value), and the target exchange is to be
declared with ``x-message-deduplication: true`` and an ``x-cache-size`` of at least 3 x ``window``
x ``partitions``. Progress per routing key is the highest offset below which every publish is
confirmed, saved once per batch of confirms (one file per partition, ``part-<n>.json``); a re-run
skips what was saved and re-sends at most the window that was in flight and a part of a piece
confirmed but not yet saved (``replay_sink.uncertain_rows``), which the broker then drops as
duplicates while their keys are still in its window.

That is why a re-run first publishes, as a job of its own, only those rows (per partition, the
first ``uncertain_rows`` past its progress): with partitions running side by side, one partition
could otherwise publish thousands of new messages, pushing the keys out of the target's window,
before another (started later, or waiting for a core) re-sends its window. Between a key's first
publish and its re-send there are then at most the windows of both runs, 2 x (window + a piece)
per partition, within the 3 x window x partitions above. That job reads only the stretch of the
log the progress files put in doubt, for the routing keys they hold (``replay_progress.doubt_range``):
resuming a run does not scan and sort the rest of a long log for it. A run that ends leaves the file
``finished`` in the progress directory (removed when the next one starts): re-running a job that
finished (to publish what the log gained since) has nothing in doubt and skips that job.

By default progress lives under ``<data dir>/replay-progress/<job>``, ``<job>`` a hash of every
job parameter (source exchange and vhost, target exchange and broker, routing-key pattern, from/to
bounds): a replay with other parameters starts afresh instead of skipping what another job
published.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from .export import read_log
from .replay_progress import doubt_range, load_progress, run_total
from .replay_sink import ReplaySink, topic_matches, uncertain_rows

__all__ = ["DEFAULT_DEDUP_HEADER", "DEFAULT_WINDOW", "job_id", "load_progress", "progress_path", "replay", "topic_matches"]

# confirms in flight per partition: enough to keep a local broker busy between two group commits
DEFAULT_WINDOW = 1000
# the header a target exchange's dedup window reads by default (LavinMQ's x-deduplication-header)
DEFAULT_DEDUP_HEADER = "x-deduplication-header"
# in the progress directory once a run ended; a run removes it as it starts, so one cut short
# leaves none and the next run resumes
FINISHED = "finished"


def job_id(*, exchange: str, vhost: str, to_exchange: str, amqp_url: str, routing_key_pattern: str | None,
           filters: dict[str, Any], source_url: str | None = None) -> str:
    """Names a replay job by everything that decides what it publishes where (credentials aside);
    ``source_url``: the broker whose HTTP API the log is read from (``--url``), when not local."""
    target = urlsplit(amqp_url)
    doc = {"exchange": exchange, "vhost": vhost, "to_exchange": to_exchange,
           "broker": f"{target.scheme}://{target.hostname}:{target.port}{target.path}",
           "routing_key": routing_key_pattern, "filters": {k: str(v) for k, v in filters.items() if v is not None}}
    if source_url is not None:
        source = urlsplit(source_url)
        doc["source"] = f"{source.scheme}://{source.hostname}:{source.port}{source.path}"
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:20]


def progress_path(data_dir: str, progress_dir: str | None, *, exchange: str, vhost: str, to_exchange: str,
                  amqp_url: str, routing_key_pattern: str | None, filters: dict[str, Any],
                  source_url: str | None = None) -> str:
    """The job's progress directory, made: ``progress_dir``, or one per job under the data directory;
    absolute, since the sink's tasks write to it and an executor's working directory is its own."""
    if progress_dir is not None:
        Path(progress_dir).mkdir(parents=True, exist_ok=True)
        return str(Path(progress_dir).absolute())
    job = job_id(exchange=exchange, vhost=vhost, to_exchange=to_exchange, amqp_url=amqp_url,
                 routing_key_pattern=routing_key_pattern, filters=filters, source_url=source_url)
    progress = Path(data_dir).absolute() / "replay-progress" / job
    progress.mkdir(parents=True, exist_ok=True)
    (progress / "job.json").write_text(json.dumps(
        {"exchange": exchange, "vhost": vhost, "to_exchange": to_exchange, "routing_key": routing_key_pattern,
         "filters": {k: str(v) for k, v in filters.items()}}))
    return str(progress)


def replay(spark: Any, data_dir: str, exchange: str, *, amqp_url: str, vhost: str = "/",
           to_exchange: str | None = None, routing_key_pattern: str | None = None, rate: float | None = None,
           progress_dir: str | None = None, partitions: int = 4, window: int = DEFAULT_WINDOW,
           dedup_header: str = DEFAULT_DEDUP_HEADER, source: dict[str, str] | None = None, **filters: Any) -> int:
    """``source``: the Spark source's options naming the log and where it is (``read_log``), in
    place of ``data_dir`` and ``exchange`` (which still name the job and its progress)."""
    from pyspark.sql import functions as F

    df = read_log(spark, data_dir, exchange, vhost=vhost, source=source, **filters)
    target = exchange if to_exchange is None else to_exchange
    keys_in: list[str] | None = None  # the routing keys the pattern takes, when there is one
    progress = progress_path(data_dir, progress_dir, exchange=exchange, vhost=vhost, to_exchange=target,
                             amqp_url=amqp_url, routing_key_pattern=routing_key_pattern, filters=filters,
                             source_url=(source or {}).get("url"))
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
            keys_in = [k.routing_key for k in keys]
            df = df.filter(F.col("routing_key").isin(keys_in))
        per_partition_rate = rate / len({k.p for k in keys}) if rate else None

    def rows_of(**bounds: int) -> Any:
        """The rows to replay (within ``bounds`` besides the job's own filters), in the sink's schema."""
        part = df if not bounds else read_log(spark, data_dir, exchange, vhost=vhost, source=source,
                                              **{**filters, **bounds})
        if keys_in is not None and bounds:
            part = part.filter(F.col("routing_key").isin(keys_in))
        return part.select("offset", "routing_key", "properties", "body")

    rows = rows_of()
    spark.dataSource.register(ReplaySink)
    # Spark looks a Python data source up in the calling thread's active session, which a thread
    # other than the session's own (the CLI's job thread) does not have: make it this session
    spark._jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)

    def publish(part: Any) -> int:
        run = uuid.uuid4().hex
        part.repartition(partitions, "routing_key").sortWithinPartitions("offset").write \
            .format("headrace-replay").mode("append").options(
                amqp_url=amqp_url, exchange=exchange, to_exchange=target, progress_dir=progress, window=str(window),
                dedup_header=dedup_header, run=run, rate="" if per_partition_rate is None else repr(per_partition_rate),
                pattern=routing_key_pattern or "").save()
        return run_total(progress, run)

    done = load_progress(progress)
    finished = Path(progress) / FINISHED
    resent = 0
    if done and not finished.exists():  # a resume: what the last run may have had in flight goes again first
        doubt, span = rows, doubt_range(progress)
        if span is not None:  # only the stretch of the log the last run can have left in doubt
            lo, hi = span
            doubt = rows_of(from_offset=max(lo + 1, filters.get("from_offset") or 0),
                           to_offset=hi if filters.get("to_offset") is None else min(hi, filters["to_offset"]))
        resent = publish(_first_past(spark, doubt, done, partitions, uncertain_rows(per_partition_rate, window),
                                     saved_keys_only=span is not None))
    finished.unlink(missing_ok=True)
    total = resent + publish(rows)
    finished.touch()  # every publish confirmed: a re-run (new rows in the log) has nothing in doubt
    return total


def _first_past(spark: Any, rows: Any, done: dict[str, int], partitions: int, limit: int,
                saved_keys_only: bool = False) -> Any:
    """Per publishing partition (the routing key's hash, as ``repartition`` places it), the first
    ``limit`` rows past the progress saved for their keys; with ``saved_keys_only``, of the keys that
    have progress saved only (``rows`` then starts past the lowest ``through``: a key without
    progress, whose partition never sent, could have rows before that, and publishing its later
    rows alone would save progress past them)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    floors = spark.createDataFrame(sorted(done.items()), "routing_key string, done long")
    place = Window.partitionBy(F.pmod(F.hash("routing_key"), F.lit(partitions))).orderBy("offset")
    return (rows.join(F.broadcast(floors), "routing_key", "inner" if saved_keys_only else "left")
            .filter(F.col("offset") > F.coalesce(F.col("done"), F.lit(-1)))
            .withColumn("_n", F.row_number().over(place)).filter(F.col("_n") <= limit)
            .select("offset", "routing_key", "properties", "body"))
