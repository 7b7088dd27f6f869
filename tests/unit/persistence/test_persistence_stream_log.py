"""Stream logs: a cursor reads its own window across segments, from any offset, stops at the
committed end and at a torn tail, and jumps past segments retention dropped."""

from __future__ import annotations

from pathlib import Path

from headrace.persistence.mirror_log import MirrorEntry, MirrorLog, MirrorRecord, Retention, list_segments
from headrace.persistence.stream_log import (
    StreamCursor,
    offset_at_time,
    read_offsets,
    stream_root,
    stream_stats,
    write_offsets,
)
from headrace.server.broker.queue_types import parse_interval_ms

T0 = 1_700_000_000_000


def write(data: Path, n: int, start: int = 0, segment: int = 2000, retention: Retention = Retention()) -> MirrorLog:
    log = MirrorLog(stream_root(data), "/", "s", segment_max_bytes=segment, index_interval_bytes=256,
                    retention=retention)
    log.recover()
    log.append_many([MirrorRecord(T0 + i * 1000, "rk", b"", b"body-%d" % i, source="ex")
                     for i in range(start, start + n)])
    log.flush()
    return log


def read(cursor: StreamCursor, end: int, max_records: int, max_bytes: int = 256 << 10) -> list[MirrorEntry]:
    batch = cursor.read(end, max_records, max_bytes)
    return batch.entries("/", "s") if batch is not None else []


def read_all(cursor: StreamCursor, end: int, max_records: int) -> list[MirrorEntry]:
    """Reads until nothing more is below ``end`` (one read stops at a segment's end)."""
    out: list[MirrorEntry] = []
    while batch := read(cursor, end, max_records - len(out)):
        out += batch
    return out


def test_cursor_reads_windows_across_segments(tmp_path):
    log = write(tmp_path, 300)
    assert len(list_segments(stream_root(tmp_path), "/", "s")) > 3
    cursor = StreamCursor(tmp_path, "/", "s", 0)
    got = []
    while batch := read(cursor, 300, 17):
        assert len(batch) <= 17
        got += batch
    assert [e.offset for e in got] == list(range(300))
    assert got[5].body == b"body-5" and got[5].source == "ex"
    log.close()


def test_each_read_is_bounded_in_bytes(tmp_path):
    """However much credit a consumer has, one read takes at most max_bytes (a record larger than
    that alone), so a wake-up's work does not grow with the consumer's backlog."""
    log = MirrorLog(stream_root(tmp_path), "/", "s", segment_max_bytes=1 << 20)
    log.recover()
    log.append_many([MirrorRecord(T0, "rk", b"", b"x" * 200) for _ in range(500)]
                    + [MirrorRecord(T0, "rk", b"", b"y" * 20_000)] + [MirrorRecord(T0, "rk", b"", b"z")])
    log.flush()
    cursor = StreamCursor(tmp_path, "/", "s", 0)
    got = []
    while batch := cursor.read(502, 10_000, 4096):
        assert batch.size <= 4096 or batch.count == 1
        got += batch.entries("/", "s")
    assert [e.offset for e in got] == list(range(502))
    assert got[500].body == b"y" * 20_000 and got[501].body == b"z"
    # a nearly spent budget still reads something (a few bytes would stall the consumer)
    batch = StreamCursor(tmp_path, "/", "s", 0).read(502, 10, 3)
    assert batch is not None and batch.count == 10
    log.close()


def test_cursor_starts_anywhere_and_stops_at_the_committed_end(tmp_path):
    log = write(tmp_path, 100)
    cursor = StreamCursor(tmp_path, "/", "s", 57)
    assert [e.offset for e in read_all(cursor, 60, 100)] == [57, 58, 59]
    assert read(cursor, 60, 100) == []
    assert [e.offset for e in read_all(cursor, 100, 100)] == list(range(60, 100))
    log.append_many([MirrorRecord(T0, "rk", b"", b"late")])
    log.flush()
    assert [e.body for e in read(cursor, 101, 10)] == [b"late"]
    log.close()


def test_cursor_behind_retention_jumps_to_the_first_segment(tmp_path):
    log = write(tmp_path, 200, retention=Retention(max_bytes=3000))
    log.enforce_retention(T0)
    first = list_segments(stream_root(tmp_path), "/", "s")[0].base_offset
    assert first > 0
    cursor = StreamCursor(tmp_path, "/", "s", 0)
    assert read(cursor, 200, 1)[0].offset == first
    assert stream_stats(tmp_path, "/", "s").first_offset == first
    log.close()


def test_torn_tail_ends_the_read(tmp_path):
    log = write(tmp_path, 10, segment=1 << 20)
    log.close()
    seg = list_segments(stream_root(tmp_path), "/", "s")[-1]
    with open(seg.path, "r+b") as f:
        f.truncate(seg.size - 3)
    cursor = StreamCursor(tmp_path, "/", "s", 0)
    assert [e.offset for e in read_all(cursor, 10, 100)] == list(range(9))


def test_offset_at_time_and_offsets_file(tmp_path):
    log = write(tmp_path, 100)
    assert offset_at_time(tmp_path, "/", "s", T0 + 42_500, 100) == 43
    assert offset_at_time(tmp_path, "/", "s", T0 - 1, 100) == 0
    assert offset_at_time(tmp_path, "/", "s", T0 + 10**9, 100) == 100
    directory = stream_root(tmp_path) / "mirror" / "%2F" / "s"
    assert read_offsets(directory) == {}
    write_offsets(directory, {"a": 5, "b": 7})
    assert read_offsets(directory) == {"a": 5, "b": 7}
    log.close()


def test_max_age_units():
    assert parse_interval_ms("7D") == 7 * 86_400_000
    assert parse_interval_ms("12h") == 12 * 3_600_000
    assert parse_interval_ms(b"30s") == 30_000
    assert parse_interval_ms("1Y") == 365 * 86_400_000
    for bad in ("7 days", "h", "", "1.5h", 7, None, "-1D"):
        assert parse_interval_ms(bad) is None
