"""``export`` and ``replay`` without a JVM: the same jobs on pyarrow alone, for logs small enough
that starting Spark (10-25 s on this kind of machine) would be nearly all of their time.

Owns no state: it reads the logs through the same ``Source`` and Arrow decode as the Spark source
(``sources.py``, ``arrow_read.py``) and publishes through the same ``publish_partition`` as the
replay sink, so the two engines differ only in who moves the batches. What a reader of the output
sees is the same whichever ran (``tests/spark/test_spark_arrow_jobs.py`` holds them to it):

- Parquet: Spark's schema (its row metadata in the footer, INT96 timestamps, snappy), one
  ``part-00000-<uuid>-c000.snappy.parquet`` per output directory, ``_SUCCESS``; partition
  directories named as Spark escapes them (``escape_path_name``).
- JSON: Spark's JSON lines (Jackson's escapes, nulls left out, ``yyyy-MM-dd'T'HH:mm:ss.SSSXXX`` in
  the local time zone, which is Spark's session zone when nothing sets it), properties and body as
  base64 text.
- replay: rows go to publishing partitions by Spark's own hash of the routing key
  (``spark_hash``: Murmur3 with Spark's tail rule, seed 42, ``pmod``), in offset order within each,
  with the same progress files; a job cut short under one engine resumes under the other.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import uuid
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .arrow_read import ARROW_SCHEMA, SCHEMA
from .replay_progress import doubt_range, load_progress, run_total
from .replay_sink import publish_partition, topic_matches, uncertain_rows
from .sources import Source

__all__ = ["ARROW_MAX_BYTES", "escape_path_name", "export_arrow", "log_table", "replay_arrow", "spark_hash"]

# Below this many bytes of log, ``--engine auto`` runs the job on pyarrow: a local read decodes
# ~150 MB/s on one core, so such a job ends in a few seconds, about Spark's start-up alone
# (benchmarks/RESULTS.md, "Small jobs without a JVM").
ARROW_MAX_BYTES = 256 << 20
# rows per batch handed to a publishing partition: Spark's spark.sql.execution.arrow.maxRecordsPerBatch,
# so a partition's progress journal moves in the same steps under either engine
REPLAY_BATCH_ROWS = 10_000
FINISHED = "finished"  # replay.FINISHED (replay.py imports Spark's functions at call time only)

_M = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M


def _mix_k1(k: int) -> int:
    return (_rotl((k * 0xCC9E2D51) & _M, 15) * 0x1B873593) & _M


def _mix_h1(h: int, k: int) -> int:
    return (_rotl(h ^ k, 13) * 5 + 0xE6546B64) & _M


def spark_hash(key: str, seed: int = 42) -> int:
    """Spark's ``hash(string)`` (``Murmur3_x86_32.hashUnsafeBytes``): little-endian words, then each
    tail byte, sign-extended, mixed as a word of its own (not Murmur3's tail); a signed int32."""
    data = key.encode()
    n = len(data)
    aligned = n - n % 4
    h = seed
    for i in range(0, aligned, 4):
        h = _mix_h1(h, _mix_k1(int.from_bytes(data[i:i + 4], "little")))
    for b in data[aligned:]:
        h = _mix_h1(h, _mix_k1((b - 256 if b > 127 else b) & _M))
    h ^= n
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & _M
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & _M
    h ^= h >> 16
    return h - (1 << 32) if h & 0x80000000 else h


def _partition_of(key: str, partitions: int) -> int:
    return spark_hash(key) % partitions  # Python's % of a negative int is Spark's pmod


def source_of(options: Mapping[str, str], vhost: str, filters: Mapping[str, Any]) -> Source:
    """The logs and bounds as ``read_log`` hands them to the Spark source (same option names)."""
    opts = {**options, "vhost": vhost}
    for key, name in (("from_offset", "fromOffset"), ("to_offset", "toOffset"), ("from_time", "fromTime"),
                      ("to_time", "toTime")):
        if filters.get(key) is not None:
            opts[name] = str(filters[key])
    return Source.parse(opts)


def log_table(source: Source) -> pa.Table:
    """Every row the source's bounds take, in log order (logs one after another)."""
    batches = [b for p in source.partitions(source.bounds) for b in p.batches()]
    return pa.Table.from_batches(batches, ARROW_SCHEMA)


# ---------------------------------------------------------------------------------------- export
_ESCAPED = frozenset('"#%\'*/:=?\\\x7f{[]^') | frozenset(chr(c) for c in range(1, 32))


def escape_path_name(value: str | None) -> str:
    """A partition value as Spark names its directory (``ExternalCatalogUtils.escapePathName``)."""
    if value is None or value == "":
        return "__HIVE_DEFAULT_PARTITION__"
    return "".join(f"%{ord(c):02X}" if c in _ESCAPED else c for c in value)


def _spark_struct(drop: str | None, fmt: str) -> str:
    """Spark's row metadata for the footer: the output's schema as Spark's JSON."""
    from pyspark.sql.types import DateType, StringType, StructField, StructType

    fields = [StructField(f.name, StringType() if fmt == "json" and f.name in ("properties", "body") else f.dataType)
              for f in SCHEMA.fields]
    if drop == "date":
        fields.append(StructField("date", DateType()))
    # Spark's own key order (the JVM writes it), not pyspark's ``json()``, which sorts the keys
    return json.dumps(StructType([f for f in fields if f.name != drop]).jsonValue(), separators=(",", ":"))


def _dates(stamps: pa.Array) -> pa.Array:
    """``to_date(timestamp)`` in the local zone: each distinct hour's UTC offset looked up once."""
    ms = pc.divide(stamps.cast(pa.int64()), 1000)
    hours = pc.divide(ms, 3_600_000)
    offsets: dict[int, int] = {}
    for hour in pc.unique(hours).to_pylist():
        stamp = datetime.fromtimestamp(hour * 3600).astimezone()
        delta = stamp.utcoffset()
        offsets[hour] = int(delta.total_seconds() * 1000) if delta is not None else 0
    shift = pc.take(pa.array([offsets[h] for h in offsets.keys()], pa.int64()),
                    pc.index_in(hours, pa.array(list(offsets.keys()), pa.int64())))
    days = pc.floor(pc.divide(pc.add(ms, shift).cast(pa.float64()), 86_400_000.0)).cast(pa.int32())
    return days.cast(pa.date32())


_JSON_ESCAPES = {i: f"\\u{i:04X}" for i in range(32)} | {8: "\\b", 9: "\\t", 10: "\\n", 12: "\\f", 13: "\\r",
                                                          34: '\\"', 92: "\\\\"}


def _jstr(s: str) -> str:
    return '"' + s.translate(_JSON_ESCAPES) + '"'


def _json_stamp(us: int) -> str:
    stamp = datetime.fromtimestamp(us // 1_000_000).astimezone()
    text = stamp.strftime("%Y-%m-%dT%H:%M:%S") + f".{us // 1000 % 1000:03d}"
    offset = stamp.strftime("%z")
    return text + ("Z" if offset in ("+0000", "") else f"{offset[:3]}:{offset[3:]}")


def _json_lines(table: pa.Table) -> Iterator[str]:
    """Spark's JSON writer's lines: fields in schema order, nulls left out, maps as objects, binary
    columns as base64 text (the export's ``F.base64``)."""
    names = table.column_names
    columns = [(table.column(n).cast(pa.int64()) if n == "timestamp" else table.column(n)).to_pylist() for n in names]
    for row in zip(*columns):
        parts = []
        for name, value in zip(names, row):
            if value is None:
                continue
            if name == "timestamp":
                text = _jstr(_json_stamp(value))
            elif isinstance(value, list):  # a map's (key, value) pairs
                text = "{" + ",".join(_jstr(k) + ":" + ("null" if v is None else _jstr(v)) for k, v in value) + "}"
            elif isinstance(value, str):
                text = _jstr(value)
            elif isinstance(value, (bytes, bytearray)):
                text = _jstr(base64.b64encode(value).decode())
            else:
                text = json.dumps(value)
            parts.append(_jstr(name) + ":" + text)
        yield "{" + ",".join(parts) + "}\n"


def _write_part(table: pa.Table, directory: Path, fmt: str, job: str, drop: str | None) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    if fmt == "json":
        with open(directory / f"part-00000-{job}-c000.json", "w", encoding="utf-8") as f:
            f.writelines(_json_lines(table))
        return
    meta = {b"org.apache.spark.version": b"4.3.0",
            b"org.apache.spark.sql.parquet.row.metadata": _spark_struct(drop, fmt).encode()}
    pq.write_table(table.replace_schema_metadata(meta), directory / f"part-00000-{job}-c000.snappy.parquet",
                   compression="snappy", use_deprecated_int96_timestamps=True)


def export_arrow(source: Source, *, out: str, fmt: str = "parquet", partition_by: str | None = None) -> int:
    """``export.export`` on pyarrow: the same files' contents, one part per output directory."""
    if fmt not in ("parquet", "json"):
        raise ValueError(f"unsupported format {fmt!r} (parquet or json)")
    if partition_by not in (None, "date", "routing_key"):
        raise ValueError("partition_by must be 'date' or 'routing_key'")
    table = log_table(source)
    if partition_by == "date":
        table = table.append_column("date", _dates(table.column("timestamp")))
    target = Path(out)
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    job = str(uuid.uuid4())
    if partition_by is None:
        if table.num_rows:
            _write_part(table, target, fmt, job, None)
    else:
        column = table.column(partition_by)
        values = column.cast(pa.string()) if partition_by == "date" else column
        for value in pc.unique(values).to_pylist():
            mask = pc.is_null(values) if value is None else pc.equal(values, value)
            part = table.filter(mask).drop_columns([partition_by])
            _write_part(part, target / f"{partition_by}={escape_path_name(value)}", fmt, job, partition_by)
    (target / "_SUCCESS").touch()
    return int(table.num_rows)


# ---------------------------------------------------------------------------------------- replay
def _publish_all(table: pa.Table, *, partitions: int, progress: str, **publish: Any) -> int:
    """Every publishing partition's rows, offset order, each through its own connection at once."""
    run = uuid.uuid4().hex
    keys = table.column("routing_key").to_pylist()
    places = {key: _partition_of(key, partitions) for key in set(keys)}
    where = pa.array([places[k] for k in keys], pa.int32())

    def one(p: int) -> int:
        rows = table.filter(pc.equal(where, p)).sort_by("offset").select(["offset", "routing_key", "properties",
                                                                           "body"])
        return publish_partition(iter(rows.to_batches(REPLAY_BATCH_ROWS)), partition=p, progress_dir=progress,
                                 run=run, **publish)

    with ThreadPoolExecutor(max_workers=min(partitions, max(os.cpu_count() or 1, 1) * 4)) as pool:
        list(pool.map(one, range(partitions)))
    return run_total(progress, run)


def _first_past(table: pa.Table, done: dict[str, int], partitions: int, limit: int, saved_keys_only: bool) -> pa.Table:
    """``replay._first_past`` on Arrow: per publishing partition, the first ``limit`` rows past the
    progress saved for their keys (of the saved keys only, with ``saved_keys_only``)."""
    keys = table.column("routing_key").to_pylist()
    offsets = table.column("offset").to_pylist()
    chosen: list[int] = []
    taken = [0] * partitions
    for i in sorted(range(len(keys)), key=offsets.__getitem__):
        key = keys[i]
        if saved_keys_only and key not in done or offsets[i] <= done.get(key, -1):
            continue
        p = _partition_of(key, partitions)
        if taken[p] < limit:
            taken[p] += 1
            chosen.append(i)
    return table.take(pa.array(sorted(chosen), pa.int64()))


def replay_arrow(source: Source, *, progress: str, amqp_url: str, exchange: str, to_exchange: str,
                 routing_key_pattern: str | None, rate: float | None, partitions: int, window: int,
                 dedup_header: str, from_offset: int | None = None, to_offset: int | None = None) -> int:
    """``replay.replay`` on pyarrow, with its resume rules: what the last run left in doubt goes
    again first, then the rest; ``finished`` marks a run that ended."""
    table = log_table(source)
    per_partition_rate = None
    if rate or routing_key_pattern is not None:
        keys = [k for k in pc.unique(table.column("routing_key")).to_pylist()
                if routing_key_pattern is None or topic_matches(routing_key_pattern, k)]
        if not keys:
            return 0
        if routing_key_pattern is not None:
            table = table.filter(pc.is_in(table.column("routing_key"), pa.array(keys, pa.string())))
        per_partition_rate = rate / len({_partition_of(k, partitions) for k in keys}) if rate else None
    Path(progress).mkdir(parents=True, exist_ok=True)
    publish = {"amqp_url": amqp_url, "exchange": exchange, "to_exchange": to_exchange, "rate": per_partition_rate,
               "pattern": routing_key_pattern, "window": window, "dedup_header": dedup_header}
    done = load_progress(progress)
    finished = Path(progress) / FINISHED
    resent = 0
    if done and not finished.exists():
        doubt, span = table, doubt_range(progress)
        if span is not None:
            lo = max(span[0] + 1, from_offset or 0)
            hi = span[1] if to_offset is None else min(span[1], to_offset)
            off = table.column("offset")
            doubt = table.filter(pc.and_(pc.greater_equal(off, lo), pc.less_equal(off, hi)))
        resent = _publish_all(_first_past(doubt, done, partitions, uncertain_rows(per_partition_rate, window),
                                          span is not None), partitions=partitions, progress=progress, **publish)
    finished.unlink(missing_ok=True)
    total = resent + _publish_all(table, partitions=partitions, progress=progress, **publish)
    finished.touch()
    return total
