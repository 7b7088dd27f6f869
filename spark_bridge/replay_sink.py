"""Replay's publishing side: a Spark sink (``format("headrace-replay")``) whose tasks each publish
one partition of the log into a broker, and the progress files that let a re-run resume.

Why a sink: its writer gets the partition as Arrow record batches (``DataSourceArrowWriter``), so
no Row object is made per message and no pandas is needed; each batch is filtered by routing key
and saved progress in bulk, encoded to AMQP frames in pieces (``replay_frames``) and written back
to back with a window of confirms (``ConfirmPublisher.send_encoded``). Progress per routing key is
the highest offset below which every publish is confirmed: one piece's worth at a time, saved once
per batch of confirms that completes a piece (``part-<n>.json``, a journal: ``replay_progress``).
The same file bounds what a killed run can have left in doubt (``doubt_range``): ``through``, up to
where the partition's rows are all confirmed, and ``bound``, the end of the Arrow batch being sent,
written with the batch's routing keys before its first publish.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, WriterCommitMessage

from .amqp_publisher import ConfirmPublisher
from .replay_frames import FrameEncoder
from .replay_progress import ProgressJournal, load_progress

__all__ = ["PIECE_ROWS", "ReplaySink", "piece_rows", "publish_partition", "topic_matches", "uncertain_rows"]


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


# rows per encoded batch (and per step of saved progress): small against the window, so a kill
# re-sends little more than the window, and big enough that the per-batch calls vanish
PIECE_ROWS = 256


def piece_rows(rate: float | None, window: int) -> int:
    """Rows per piece: one when paced (progress stays current), else at most a quarter window."""
    return 1 if rate else max(1, min(PIECE_ROWS, window // 4))


def uncertain_rows(rate: float | None, window: int) -> int:
    """Rows past a partition's saved progress that a killed run may have sent: a window in flight
    and the rest of a piece confirmed only in part (``send_encoded`` keeps a piece within the window)."""
    return window + piece_rows(rate, window)


def _keep_mask(batch: pa.RecordBatch, done: dict[str, int], pattern: str | None,
               matches: dict[str, bool]) -> pa.Array | None:
    """Rows still to publish: their routing key matches ``pattern`` and their offset is past what
    an earlier run confirmed for that key (None: all of them). One decision per distinct key."""
    if not done and pattern is None:
        return None
    encoded = batch.column("routing_key").dictionary_encode()
    keys = encoded.dictionary.to_pylist()
    if pattern is not None:
        for rk in keys:
            if rk not in matches:
                matches[rk] = topic_matches(pattern, rk)
    # a key the pattern excludes gets a threshold no offset passes
    floor = [done.get(rk, -1) if pattern is None or matches[rk] else 2 ** 62 for rk in keys]
    return pc.greater(batch.column("offset"), pc.take(pa.array(floor, pa.int64()), encoded.indices))


def publish_partition(batches: Iterator[pa.RecordBatch], *, partition: int, amqp_url: str, exchange: str,
                      to_exchange: str, progress_dir: str, rate: float | None, pattern: str | None,
                      window: int, dedup_header: str, run: str = "") -> int:
    """Publishes one partition's rows (offset order; every routing key in one partition) with a
    window of confirms, skipping what ``progress_dir`` says an earlier run confirmed; returns how
    many it published, also written to its progress file under ``run``."""
    done = load_progress(progress_dir)
    journal = ProgressJournal(progress_dir, partition)  # every key it saw, at least as loaded
    # (last tag of a piece, its first offset, last offset per routing key in it), in publish order
    pending: deque[tuple[int, int, dict[str, int]]] = deque()
    # this partition's rows up to ``through`` are confirmed (rows go out in offset order, and those
    # skipped were confirmed by an earlier run); none past ``bound`` is sent before the file says so
    through = bound = -1
    sent = seen = -1  # the last offset sent; the last offset read
    matches: dict[str, bool] = {}
    encoder = FrameEncoder(to_exchange, exchange, ("x-replayed-from", dedup_header))
    pub: ConfirmPublisher | None = None
    published = 0
    start = time.monotonic()
    piece = piece_rows(rate, window)

    def confirmed(tag: int) -> None:
        nonlocal through
        moved = False
        while pending and pending[0][0] <= tag:
            for rk, offset in pending.popleft()[2].items():
                journal.note(rk, offset)
            moved = True
        if moved:
            through = pending[0][1] - 1 if pending else sent
            journal.save(run, published, through, bound)

    try:
        for batch in batches:
            if batch.num_rows:
                seen = batch.column("offset")[-1].as_py()
            mask = _keep_mask(batch, done, pattern, matches)
            for rk in batch.column("routing_key").unique().to_pylist():
                if rk not in journal.offsets and (pattern is None or matches[rk]):
                    journal.note(rk, done.get(rk, -1))
            if mask is not None:
                batch = batch.filter(mask)
            if not batch.num_rows:
                continue
            if pub is None:
                pub = ConfirmPublisher(amqp_url, window=window).connect()
                pub.on_confirmed = confirmed
                encoder.frame_max = pub.frame_max
            offsets = batch.column("offset").to_pylist()
            keys = batch.column("routing_key").to_pylist()
            props = batch.column("properties").to_pylist()
            bodies = batch.column("body").to_pylist()
            if not pending and sent < 0:
                through = offsets[0] - 1  # the rows before the first to send were confirmed before
            if offsets[-1] > bound:  # the file says how far this batch goes (and its keys, noted above)
                bound = offsets[-1]  # before any of it is sent
                journal.save(run, published, through, bound)
            for lo in range(0, len(offsets), piece):
                hi = lo + piece
                if rate:
                    delay = start + published / rate - time.monotonic()
                    if delay > 0:
                        pub.wait_confirms()  # a paced replay keeps its progress current
                        time.sleep(delay)
                piece_offsets, piece_keys = offsets[lo:hi], keys[lo:hi]
                frames = encoder.encode(piece_offsets, piece_keys, props[lo:hi], bodies[lo:hi])
                tag = pub.send_encoded(frames, len(piece_offsets))
                sent = piece_offsets[-1]
                # offsets rise within a partition: the last one per key is its highest
                pending.append((tag, piece_offsets[0], dict(zip(piece_keys, piece_offsets))))
                if pub.confirmed >= tag:  # its acks came in while it was being sent
                    confirmed(pub.confirmed)
                published += len(piece_offsets)
        if pub is not None:
            pub.wait_confirms()
            confirmed(pub.confirmed)
        if journal.offsets or published:  # a partition without rows leaves an earlier run's file alone
            through = max(through, seen)  # every row read is confirmed now, or was skipped as confirmed
            journal.save(run, published, through, bound)
    finally:
        if pub is not None:
            pub.close()
    return published


class ReplaySink(DataSource):
    """``df.write.format("headrace-replay")``: options ``amqp_url``, ``exchange`` (the source, for
    the keys), ``to_exchange``, ``progress_dir``, ``window``, ``dedup_header``, ``run``, and
    optionally ``rate`` (per partition) and ``pattern``."""

    @classmethod
    def name(cls) -> str:
        return "headrace-replay"

    def schema(self) -> str:
        return "offset long, routing_key string, properties binary, body binary"

    def writer(self, schema: Any, overwrite: bool) -> _PartitionPublisher:
        return _PartitionPublisher(dict(self.options))


class _PartitionPublisher(DataSourceArrowWriter):
    def __init__(self, options: dict[str, str]) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        from pyspark import TaskContext

        o = self.options
        context = TaskContext.get()
        publish_partition(iterator, partition=context.partitionId() if context else 0, amqp_url=o["amqp_url"],
                          exchange=o["exchange"], to_exchange=o["to_exchange"], progress_dir=o["progress_dir"],
                          rate=float(o["rate"]) if o.get("rate") else None, pattern=o.get("pattern") or None,
                          window=int(o["window"]), dedup_header=o["dedup_header"], run=o.get("run", ""))
        return WriterCommitMessage()
