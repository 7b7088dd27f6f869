"""Segment files: naming order, framing identical to records.py, torn-tail cut on reopen."""

from __future__ import annotations

from pathlib import Path

import pytest

from headrace.persistence.records import encode_record, iter_records
from headrace.persistence.segments import (
    PREALLOC_BYTES,
    SegmentWriter,
    list_segments,
    record_header,
    segment_path,
    zero_tail,
)


def test_listing_is_in_numeric_order_and_ignores_other_files(tmp_path: Path) -> None:
    for seq in (10, 2, 1_000_000, 1):
        segment_path(tmp_path, seq).touch()
    (tmp_path / "notes.txt").touch()
    (tmp_path / "12.seg").touch()  # not our width
    (tmp_path / "definitions.json.tmp").touch()
    assert [seq for seq, _ in list_segments(tmp_path)] == [1, 2, 10, 1_000_000]


@pytest.mark.parametrize(
    "parts",
    [(), (b"",), (b"abc",), (b"meta", b"", b"body" * 100), (bytes(range(256)), b"\x00")],
)
def test_parts_are_framed_exactly_like_encode_record(tmp_path: Path,
                                                     parts: tuple[bytes, ...]) -> None:
    payload = b"".join(parts)
    expected = encode_record(7, payload)
    assert record_header(7, parts) + payload == expected
    w = SegmentWriter(tmp_path, 1)
    assert w.append(7, parts) == len(expected) == w.size
    w.close()
    assert segment_path(tmp_path, 1).read_bytes() == expected


def test_reopening_at_a_valid_end_cuts_the_torn_tail(tmp_path: Path) -> None:
    w = SegmentWriter(tmp_path, 3)
    w.append(1, (b"first",))
    good = w.size
    w.append(1, (b"second",))
    w.close()
    path = segment_path(tmp_path, 3)
    path.write_bytes(path.read_bytes()[:-2])  # torn write
    w = SegmentWriter(tmp_path, 3, start=good)
    w.append(1, (b"third",))
    w.close()
    assert [r.payload for r in iter_records(path.read_bytes())] == [b"first", b"third"]


# -- zeros kept ahead by a syncing writer (fdatasync without a journal commit) --------------------


def test_a_sync_keeps_zeros_ahead_of_the_last_record_and_close_cuts_them(tmp_path: Path) -> None:
    w = SegmentWriter(tmp_path, 1)
    w.append(1, (b"a" * 100,))
    w.fsync()
    data = segment_path(tmp_path, 1).read_bytes()
    assert len(data) == w.flushed + PREALLOC_BYTES  # the zeros a later group commit overwrites
    assert zero_tail(data, w.flushed) and [r.payload for r in iter_records(data)] == [b"a" * 100]
    for i in range(50):  # groups inside the zeros: the file's size does not move
        w.append(1, (bytes([i]) * 100,))
        w.fsync()
    assert segment_path(tmp_path, 1).stat().st_size == len(data)
    w.close()
    data = segment_path(tmp_path, 1).read_bytes()
    assert len(data) == w.flushed and len(list(iter_records(data))) == 51  # sealed: ends at its last record


def test_a_group_larger_than_the_zeros_runs_past_them_and_the_next_sync_reserves_again(tmp_path: Path) -> None:
    w = SegmentWriter(tmp_path, 1)
    w.append(1, (b"x",))
    w.fsync()
    big = [bytes([i % 251]) * 60_000 for i in range(40)]  # 2.4 MB in one group
    for body in big:
        w.append(2, (body,))
    w.fsync()
    data = segment_path(tmp_path, 1).read_bytes()
    assert [r.payload for r in iter_records(data)] == [b"x", *big]
    assert len(data) == w.flushed + PREALLOC_BYTES and zero_tail(data, w.flushed)
    w.close()


def test_writes_that_are_never_synced_leave_no_zeros(tmp_path: Path) -> None:
    w = SegmentWriter(tmp_path, 1)
    w.append(1, (b"acks and deliveries",))
    w.flush()
    assert segment_path(tmp_path, 1).stat().st_size == w.flushed
    w.close()


def test_zero_tail_tells_preallocated_space_from_a_torn_record() -> None:
    record = encode_record(1, b"payload")
    assert zero_tail(record + bytes(4096), len(record))
    assert zero_tail(record, len(record))
    assert not zero_tail(record + record[:5] + bytes(100), len(record))  # torn, then zeros
    assert not zero_tail(record + b"\x00\x00\x07", len(record))
