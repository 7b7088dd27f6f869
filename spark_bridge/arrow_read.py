"""Mirror log ranges as ``pyarrow.RecordBatch``es: the bulk decode behind the ``headrace`` source.

A range is read with one file read; ``scan_span`` walks its records once (one unpack and one CRC
each) and notes where every field lies. All fields of a batch then sit in one Arrow binary array
over the read buffer (five elements per record: frame, routing key, meta, properties, body), and
each column is a ``take`` of every fifth element, copied by Arrow in C. Per-record Python is the
walk alone, plus a JSON decode for records that carry headers/content-type/message-id meta.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import (
    BinaryType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from headrace.persistence.mirror_log import ReadRange, SpanScan, scan_span
from headrace.persistence.tier_manifest import read_uri

__all__ = ["ARROW_SCHEMA", "SCHEMA", "BATCH_ROWS", "Bounds", "buffer_batches", "range_batches", "timestamp_ms"]

SCHEMA = StructType([
    StructField("offset", LongType()),
    StructField("timestamp", TimestampType()),
    StructField("vhost", StringType()),
    StructField("exchange", StringType()),
    StructField("routing_key", StringType()),
    StructField("headers", MapType(StringType(), StringType())),
    StructField("content_type", StringType()),
    StructField("message_id", StringType()),
    StructField("properties", BinaryType()),
    StructField("body", BinaryType()),
])
# what Spark checks a returned batch against (to_arrow_schema(SCHEMA, timezone="UTC"))
ARROW_SCHEMA = pa.schema([
    ("offset", pa.int64()), ("timestamp", pa.timestamp("us", tz="UTC")), ("vhost", pa.string()),
    ("exchange", pa.string()), ("routing_key", pa.string()), ("headers", pa.map_(pa.string(), pa.string())),
    ("content_type", pa.string()), ("message_id", pa.string()), ("properties", pa.binary()),
    ("body", pa.binary()),
])
# rows per batch: large enough that the per-batch Arrow calls vanish, small enough for a worker
BATCH_ROWS = 65_536


@dataclass(frozen=True, slots=True)
class Bounds:
    """Exact, inclusive row bounds (None: unbounded) and an optional routing key to equal."""
    from_offset: int | None = None
    to_offset: int | None = None
    from_ts: int | None = None
    to_ts: int | None = None
    routing_key: str | None = None

    def any(self) -> bool:
        return any(v is not None for v in (self.from_offset, self.to_offset, self.from_ts, self.to_ts,
                                           self.routing_key))


def timestamp_ms(value: Any, *, ceil: bool) -> int:
    """A pushed-down timestamp literal (aware datetime; naive read as UTC) in whole ms, rounded
    up or down so that comparing ms stamps stays exact."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    micros: int = (value - datetime(1970, 1, 1, tzinfo=timezone.utc)) // timedelta(microseconds=1)
    return -(-micros // 1000) if ceil else micros // 1000


def _strings(binary: pa.Array) -> pa.Array:
    try:
        return binary.cast(pa.string())
    except pa.ArrowInvalid:  # not UTF-8 (a key from a lenient client): replaced, as row reads did
        return pa.array([None if b is None else b.decode("utf-8", "replace") for b in binary.to_pylist()],
                        pa.string())


def _meta_columns(meta: pa.Array) -> tuple[pa.Array, pa.Array, pa.Array]:
    headers: list[Any] = []
    types: list[Any] = []
    ids: list[Any] = []
    for raw in meta.to_pylist():
        doc = json.loads(raw) if raw else {}
        headers.append(doc.get("h"))
        types.append(doc.get("ct"))
        ids.append(doc.get("id"))
    return (pa.array(headers, ARROW_SCHEMA.field("headers").type), pa.array(types, pa.string()),
            pa.array(ids, pa.string()))


def _batch(data: pa.Buffer, scan: SpanScan, vhost: str, exchange: str) -> pa.RecordBatch:
    n = len(scan.offsets)
    fields = pa.Array.from_buffers(pa.binary(), 5 * n, [None, pa.py_buffer(scan.bounds), data])

    def column(i: int) -> pa.Array:
        return fields.take(pa.array(range(i, 5 * n, 5), pa.int32()))

    stamps = pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(scan.timestamps)])
    if scan.has_meta:
        headers, content_types, message_ids = _meta_columns(column(2))
    else:
        headers = pa.nulls(n, ARROW_SCHEMA.field("headers").type)
        content_types = message_ids = pa.nulls(n, pa.string())
    columns = [
        pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(scan.offsets)]),
        pc.multiply(stamps, 1000).cast(pa.timestamp("us", tz="UTC")),
        pa.repeat(pa.scalar(vhost, pa.string()), n),
        pa.repeat(pa.scalar(exchange, pa.string()), n),
        _strings(column(1)),
        headers, content_types, message_ids,
        column(3),
        column(4),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)


def _filtered(batch: pa.RecordBatch, b: Bounds) -> pa.RecordBatch:
    mask = None
    for name, op, value in (("offset", pc.greater_equal, b.from_offset), ("offset", pc.less_equal, b.to_offset),
                            ("timestamp", pc.greater_equal, b.from_ts), ("timestamp", pc.less_equal, b.to_ts),
                            ("routing_key", pc.equal, b.routing_key)):
        if value is None:
            continue
        if name == "timestamp":
            value = pa.scalar(value * 1000, pa.timestamp("us", tz="UTC"))
        term = op(batch.column(name), value)
        mask = term if mask is None else pc.and_(mask, term)
    return batch if mask is None else batch.filter(mask)


def range_batches(r: ReadRange, vhost: str, exchange: str, bounds: Bounds,
                  max_rows: int = BATCH_ROWS) -> Iterator[pa.RecordBatch]:
    """The rows of one range of a local segment within ``bounds``, as batches of at most ``max_rows``
    rows; stops at a torn tail (a record being written). A segment whose local copy is gone is read
    from its tier copy (``ReadRange.tier``, any ``pyarrow.fs`` URI)."""
    try:
        with open(r.path, "rb") as f:
            f.seek(r.start)
            raw = f.read() if r.stop is None else f.read(r.stop - r.start)
    except OSError:  # only in the log's tier, or dropped by retention since planning
        if r.tier is None:
            return
        try:
            raw = read_uri(r.tier, r.start, r.stop)
        except FileNotFoundError:  # dropped from the tier since planning
            return
    yield from buffer_batches(raw, vhost, exchange, bounds, max_rows)


def buffer_batches(raw: bytes | bytearray, vhost: str, exchange: str, bounds: Bounds,
                   max_rows: int = BATCH_ROWS) -> Iterator[pa.RecordBatch]:
    """The rows of a buffer of whole records (a range of a segment, read from its file or fetched
    from the broker over HTTP) within ``bounds``; stops at a torn tail."""
    data = pa.py_buffer(raw)
    pos, stop = 0, len(raw)
    while pos < stop:
        scan = scan_span(raw, pos, stop, max_rows)
        if scan.offsets:
            # bounds are positions in raw; a batch's fields array starts at raw[0]
            batch = _batch(data, scan, vhost, exchange)
            if bounds.any():
                batch = _filtered(batch, bounds)
            if batch.num_rows:
                yield batch
            if bounds.to_offset is not None and scan.offsets[-1] >= bounds.to_offset:
                return
        if scan.torn:
            return
        if scan.end == pos:  # a record of another kind: skip it
            pos += 9 + int.from_bytes(raw[pos:pos + 4], "big")
        else:
            pos = scan.end
