"""The Arrow read path: ranges cut from the sparse index, bulk-decoded batches, pushed-down filters;
checked row for row against the log's own record reader."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from pyspark.sql import functions as F

from headrace.persistence.mirror_log import MirrorLog, MirrorRecord, list_segments, read_entries, read_ranges
from headrace.spark_bridge.arrow_read import Bounds, range_batches

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

T0 = 1_700_000_000_000


def write_log(root, n=3000, exchange="ev", segment_max_bytes=64 << 10):
    log = MirrorLog(root, "/", exchange, segment_max_bytes=segment_max_bytes, index_interval_bytes=1024)
    log.recover()
    records = []
    for i in range(n):
        meta = i % 4 == 0  # some records carry headers/content-type/message-id, most do not
        records.append(MirrorRecord(T0 + i * 10, f"ev.{i % 5}", bytes([i % 256]) * (i % 3), b"b%d-" % i * (i % 7),
                                    {"n": str(i)} if meta else None, "text/plain" if meta else None,
                                    f"m{i}" if meta else None))
    log.append_many(records)
    log.close()
    return [e for seg in list_segments(root, "/", exchange) for e in read_entries(seg)]


def as_tuple(e):
    return (e.offset, datetime.fromtimestamp(e.timestamp_ms / 1000, timezone.utc), e.vhost, e.exchange,
            e.routing_key, e.headers, e.content_type, e.message_id, bytes(e.props_raw), bytes(e.body))


def read(spark, root, **options):
    reader = spark.read.format("headrace").option("path", str(root)).option("exchange", "ev")
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load()


def row_tuple(r):
    return (r.offset, r.timestamp.astimezone(timezone.utc), r.vhost, r.exchange, r.routing_key,
            r.headers, r.content_type, r.message_id, bytes(r.properties), bytes(r.body))


def test_ranges_cover_every_offset_once(tmp_path):
    entries = write_log(tmp_path)
    assert len(list_segments(tmp_path, "/", "ev")) > 2
    ranges = read_ranges(tmp_path, "/", "ev", target_bytes=8 << 10)
    assert len(ranges) > len(list_segments(tmp_path, "/", "ev"))  # cut inside segments
    seen = [o for r in ranges for b in range_batches(r, "/", "ev", Bounds(), max_rows=100)
            for o in b.column("offset").to_pylist()]
    assert seen == [e.offset for e in entries]
    for r in ranges:  # a range's declared offsets hold exactly what it yields
        offsets = [o for b in range_batches(r, "/", "ev", Bounds()) for o in b.column("offset").to_pylist()]
        assert offsets[0] == r.first_offset and (r.end_offset is None or offsets[-1] == r.end_offset - 1)


def test_bounded_ranges_prune_and_stay_exact(tmp_path):
    entries = write_log(tmp_path)
    for lo, hi in ((0, 0), (17, 1234), (1500, 2999), (2999, 5000), (700, 699)):
        ranges = read_ranges(tmp_path, "/", "ev", target_bytes=8 << 10, from_offset=lo, to_offset=hi)
        got = [o for r in ranges for b in range_batches(r, "/", "ev", Bounds(lo, hi))
               for o in b.column("offset").to_pylist()]
        assert got == [e.offset for e in entries if lo <= e.offset <= hi]
    lo_ts, hi_ts = T0 + 10 * 333 + 5, T0 + 10 * 2100
    ranges = read_ranges(tmp_path, "/", "ev", target_bytes=8 << 10, from_ts=lo_ts, to_ts=hi_ts)
    assert len(ranges) < len(read_ranges(tmp_path, "/", "ev", target_bytes=8 << 10))
    got = [o for r in ranges for b in range_batches(r, "/", "ev", Bounds(from_ts=lo_ts, to_ts=hi_ts))
           for o in b.column("offset").to_pylist()]
    assert got == list(range(334, 2101))


def test_timestamps_never_go_back_along_the_log(tmp_path):
    log = MirrorLog(tmp_path, "/", "ev")
    log.recover()
    log.append_many([MirrorRecord(T0 + 50, "k", b"", b"a"), MirrorRecord(T0, "k", b"", b"b")])
    log.close()
    log = MirrorLog(tmp_path, "/", "ev")
    log.recover()  # the clamp survives a reopen
    log.append_many([MirrorRecord(T0 + 10, "k", b"", b"c")])
    log.close()
    assert [e.timestamp_ms for e in read_entries(list_segments(tmp_path, "/", "ev")[0])] == [T0 + 50] * 3


def test_multi_partition_read_equals_the_log_row_for_row(spark, tmp_path):
    entries = write_log(tmp_path)
    df = read(spark, tmp_path, partitionBytes=8 << 10)
    assert df.rdd.getNumPartitions() > len(list_segments(tmp_path, "/", "ev"))
    rows = df.collect()
    assert [row_tuple(r) for r in sorted(rows, key=lambda r: r.offset)] == [as_tuple(e) for e in entries]
    assert read(spark, tmp_path, partitionBytes=8 << 10).count() == len(entries)


def test_pushed_filters_are_exact(spark, tmp_path):
    entries = write_log(tmp_path)

    def df():  # a DataFrame per query: see PushdownReader
        return read(spark, tmp_path, partitionBytes=8 << 10, pushFilters="true")

    cut = datetime.fromtimestamp((T0 + 10 * 1000 + 5) / 1000, timezone.utc)  # between two records
    q = df().filter((F.col("routing_key") == "ev.2") & (F.col("offset") >= 300) & (F.col("offset") < 2500)
                    & (F.col("timestamp") >= F.lit(cut)))
    assert "ev.2" not in q._jdf.queryExecution().executedPlan().toString().split("BatchScan")[0]  # pushed
    got = sorted(r.offset for r in q.collect())
    assert got == [e.offset for e in entries if e.routing_key == "ev.2" and 300 <= e.offset < 2500
                   and e.offset >= 1001]
    q = df().filter((F.col("offset") > 2990) | (F.col("routing_key") == "ev.4"))  # not pushed: Spark filters
    assert sorted(r.offset for r in q.collect()) == [e.offset for e in entries
                                                     if e.offset > 2990 or e.routing_key == "ev.4"]
    q = df().filter((F.col("timestamp") > F.lit(cut)) & (F.col("timestamp") <= F.lit(cut)))
    assert q.count() == 0
    q = df().filter(F.col("offset") == 42)
    assert [row_tuple(r) for r in q.collect()] == [as_tuple(entries[42])]


def test_default_reader_reuses_a_dataframe_across_queries(spark, tmp_path):
    entries = write_log(tmp_path)
    df = read(spark, tmp_path, partitionBytes=8 << 10, routingKey="ev.1", fromOffset=10)
    assert df.filter(F.col("offset") >= 2990).count() == 2
    assert df.count() == sum(1 for e in entries if e.routing_key == "ev.1" and e.offset >= 10)
    assert df.filter(F.col("offset") < 100).count() == len([o for o in range(10, 100) if o % 5 == 1])


def test_torn_tail_ends_the_read(spark, tmp_path):
    entries = write_log(tmp_path, n=200, segment_max_bytes=1 << 20)
    seg = list_segments(tmp_path, "/", "ev")[-1].path
    with open(seg, "ab") as f:
        f.write(b"\x00\x00\x01\x00garbage")  # a record being written
    assert sorted(r.offset for r in read(spark, tmp_path).select("offset").collect()) == \
        [e.offset for e in entries]
