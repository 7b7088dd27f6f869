"""``df.writeStream.format("headrace")``: each micro-batch published into an exchange, exactly once.

Each task publishes its partition of the batch with a window of publisher confirms
(``ConfirmPublisher``) and succeeds only once every publish is confirmed, so a batch Spark commits
is in the broker. What makes it exactly once is the target's dedup window: every message carries a
key in ``dedupHeader`` (``x-deduplication-header``), the same whenever that row is published again,
and an exchange declared with ``x-message-deduplication`` drops a key it already has. A batch is
published again when the query stopped (a SIGKILL of the driver included) after publishing it and
before its commit reached the checkpoint, or when a task is retried; Spark re-runs it from the
checkpoint with the same offsets, so the same rows get the same keys:

- ``keyColumns`` (e.g. ``exchange,offset`` for rows of the ``headrace`` source): the row's values
  of those columns joined by ``:``, keys that hold whatever the plan does (a shuffle reorders rows);
- otherwise ``<query id>:<batch id>:<partition>:<row>``, Spark's query id (kept in the checkpoint)
  and batch id (the idempotent-sink contract of Spark's exactly-once sinks), which needs the batch
  recomputed with the same rows per partition in the same order (no shuffle before the sink).

The window must hold a batch's keys until it is re-run: at least the rows of one micro-batch
(``maxRecordsPerTrigger`` on the source bounds them), while nothing else publishes to the exchange.

Columns: ``body`` (binary or string) is required; ``routing_key`` (else the option ``routingKey``)
and ``properties`` (AMQP-encoded basic properties, as the ``headrace`` source reads them) are used
when present. Options: ``amqpUrl``, ``exchange`` (the target), ``routingKey``, ``dedupHeader``,
``keyColumns``, ``window`` (confirms in flight per task, 1,000).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage

from .amqp_publisher import ConfirmPublisher
from .replay_frames import FrameEncoder

__all__ = ["DEFAULT_AMQP_URL", "HeadraceStreamWriter", "SinkCommit"]

DEFAULT_AMQP_URL = "amqp://guest:guest@127.0.0.1:5672/%2F"
PIECE = 256  # publishes encoded and sent at a time
# the local properties Spark's micro-batch execution sets on every job of a batch
BATCH_ID_KEY, QUERY_ID_KEY = "streaming.sql.batchId", "sql.streaming.queryId"


@dataclass
class SinkCommit(WriterCommitMessage):
    """What one task published: the rows of its partition, all confirmed."""
    partition: int
    rows: int


class HeadraceStreamWriter(DataSourceStreamArrowWriter):
    """Made on the driver (which checks the options, the columns and that the exchange exists) and
    shipped to the tasks, which publish."""

    def __init__(self, options: Mapping[str, str], schema: Any) -> None:
        self.amqp_url = options.get("amqpUrl") or DEFAULT_AMQP_URL
        self.exchange = options.get("exchange")
        if self.exchange is None:
            raise ValueError("the headrace sink needs the option 'exchange': the exchange to publish to")
        self.routing_key = options.get("routingKey") or ""
        self.dedup_header = options.get("dedupHeader") or "x-deduplication-header"
        self.key_columns = [c.strip() for c in (options.get("keyColumns") or "").split(",") if c.strip()]
        self.window = int(options.get("window") or 1000)
        names = set(schema.fieldNames()) if schema is not None else set()
        missing = [c for c in ["body", *self.key_columns] if c not in names]
        if missing:
            raise ValueError(f"the headrace sink needs the column(s) {', '.join(missing)}; the DataFrame has "
                             f"{', '.join(sorted(names))}")
        self.has_key = "routing_key" in names
        self.has_props = "properties" in names
        self._check_exchange()

    def _check_exchange(self) -> None:
        assert self.exchange is not None
        publisher = ConfirmPublisher(self.amqp_url, timeout=10).connect()
        try:
            if not publisher.exchange_exists(self.exchange):
                raise ValueError(f"the headrace sink's exchange '{self.exchange}' does not exist: declare it first, "
                                 f"with x-message-deduplication=true and an x-cache-size of at least a micro-batch's "
                                 f"rows for exactly once")
        finally:
            publisher.close()

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommit:
        from pyspark import TaskContext

        context = TaskContext.get()
        assert context is not None
        batch, query = context.getLocalProperty(BATCH_ID_KEY), context.getLocalProperty(QUERY_ID_KEY)
        if not self.key_columns and (batch is None or query is None):
            raise RuntimeError("the headrace sink found no micro-batch id in its task (Spark sets "
                               f"{BATCH_ID_KEY} and {QUERY_ID_KEY}); give the option keyColumns")
        partition = context.partitionId()
        published = publish_rows(iterator, amqp_url=self.amqp_url, exchange=self.exchange or "",
                                 prefix=f"{query}:{batch}:{partition}", key_columns=self.key_columns,
                                 routing_key=None if self.has_key else self.routing_key,
                                 with_props=self.has_props, dedup_header=self.dedup_header, window=self.window)
        return SinkCommit(partition, published)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing left to do: every task's publishes were confirmed before it returned."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to undo: what a failed batch published is published again, under the same keys,
        when Spark re-runs it, and the target's dedup window drops those it has."""


def _binary(column: pa.Array) -> list[bytes | None]:
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        column = pc.cast(column, pa.binary())
    values: list[bytes | None] = column.to_pylist()
    return values


def publish_rows(batches: Iterator[pa.RecordBatch], *, amqp_url: str, exchange: str, prefix: str,
                 key_columns: list[str], routing_key: str | None, with_props: bool, dedup_header: str,
                 window: int) -> int:
    """Publishes every row of ``batches`` with its dedup key and waits for all the confirms;
    returns how many. The connection opens at the first row (an empty partition makes none)."""
    encoder = FrameEncoder(exchange, prefix, (dedup_header,))
    pub: ConfirmPublisher | None = None
    row = 0
    try:
        for batch in batches:
            n = batch.num_rows
            if not n:
                continue
            if pub is None:
                pub = ConfirmPublisher(amqp_url, window=window).connect()
                encoder.frame_max = pub.frame_max
            bodies = _binary(batch.column("body"))
            keys: list[str] = [routing_key] * n if routing_key is not None \
                else [k or "" for k in batch.column("routing_key").to_pylist()]
            props: list[bytes | None] = batch.column("properties").to_pylist() if with_props else [None] * n
            own: list[bytes] | None = None
            if key_columns:
                parts = [pc.cast(batch.column(c), pa.string()) for c in key_columns]
                joined = pc.binary_join_element_wise(*parts, ":") if len(parts) > 1 else parts[0]
                own = [(k or "").encode() for k in joined.to_pylist()]
            for lo in range(0, n, PIECE):
                hi = min(n, lo + PIECE)
                frames = encoder.encode(range(row + lo, row + hi), keys[lo:hi], props[lo:hi], bodies[lo:hi],
                                        None if own is None else own[lo:hi])
                pub.send_encoded(frames, hi - lo)
            row += n
        if pub is not None:
            pub.wait_confirms()
    finally:
        if pub is not None:
            pub.close()
    return row

