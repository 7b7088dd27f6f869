"""Segment files: naming order, framing identical to records.py, torn-tail cut on reopen."""

from __future__ import annotations

from pathlib import Path

import pytest

from headrace.persistence.records import encode_record, iter_records
from headrace.persistence.segments import SegmentWriter, list_segments, record_header, segment_path


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
