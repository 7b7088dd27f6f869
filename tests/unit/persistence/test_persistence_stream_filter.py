"""Stream filtering on disk: the chunk Bloom filter never misses a value and rarely claims one it
does not hold, a filtered cursor steps over the chunks it rules out without reading them, and
recovery drops the entries of a torn tail."""

from __future__ import annotations

import os
import random
from pathlib import Path

from headrace.persistence.mirror_log import MirrorLog, MirrorRecord, list_segments
from headrace.persistence.mirror_records import row_of
from headrace.persistence.stream_filter import (
    BLOOM_BYTES,
    Bloom,
    StreamFilter,
    read_chunks,
)
from headrace.persistence.stream_log import StreamCursor, stream_root

T0 = 1_700_000_000_000


def test_bloom_has_no_false_negatives_and_few_false_positives():
    rng = random.Random(7)
    false_positives = tests = 0
    for _ in range(2000):
        held = [b"v%d" % rng.randrange(10**9) for _ in range(5)]
        bloom = Bloom()
        for value in held:
            bloom.add(value)
        bloom = Bloom(bloom.to_bytes())  # through the side file's bytes
        assert len(bloom.to_bytes()) == BLOOM_BYTES
        assert all(bloom.may_hold(v) for v in held)
        for _ in range(20):
            tests += 1
            false_positives += bloom.may_hold(b"absent-%d" % rng.randrange(10**9))
    # 5 values in 128 bits with 2 hashes: (1 - e^(-10/128))^2 = 0.57 %
    assert false_positives / tests < 0.015


def write_groups(data: Path, groups: list[tuple[bytes | None, int]], segment: int = 64 << 20) -> MirrorLog:
    """One append (one chunk) per group of ``count`` records with filter value ``value``."""
    log = MirrorLog(stream_root(data), "/", "s", segment_max_bytes=segment, index_interval_bytes=256)
    log.recover()
    offset = 0
    for value, count in groups:
        rows = [row_of(MirrorRecord(T0, "rk", b"", b"body-%d" % (offset + i), source="ex")) for i in range(count)]
        log.append_rows(rows, [value] * count)
        offset += count
    log.flush()
    return log


def read_offsets(cursor: StreamCursor, end: int) -> tuple[list[int], int]:
    """Offsets of every record the cursor read, and how many reads it took."""
    got: list[int] = []
    reads = 0
    while batch := cursor.read(end, 10_000):
        reads += 1
        got += [e.offset for e in batch.entries("/", "s")]
    return got, reads


def test_filtered_cursor_reads_only_the_chunks_that_may_match(tmp_path):
    groups = [(b"a", 50), (b"b", 50), (None, 50), (b"b", 50), (b"a", 50), (b"c", 50)]
    log = write_groups(tmp_path, groups)
    assert len(read_chunks(list_segments(stream_root(tmp_path), "/", "s")[0].path)) == 6
    only_a, _ = read_offsets(StreamCursor(tmp_path, "/", "s", 0, StreamFilter(frozenset({b"a"}))), 300)
    assert only_a == list(range(50)) + list(range(200, 250))
    a_or_unfiltered, _ = read_offsets(StreamCursor(tmp_path, "/", "s", 0, StreamFilter(frozenset({b"a"}), True)), 300)
    assert a_or_unfiltered == list(range(50)) + list(range(100, 150)) + list(range(200, 250))
    b_or_c, _ = read_offsets(StreamCursor(tmp_path, "/", "s", 0, StreamFilter(frozenset({b"b", b"c"}))), 300)
    assert b_or_c == list(range(50, 100)) + list(range(150, 200)) + list(range(250, 300))
    unfiltered, _ = read_offsets(StreamCursor(tmp_path, "/", "s", 0), 300)
    assert unfiltered == list(range(300))
    nothing = StreamCursor(tmp_path, "/", "s", 0, StreamFilter(frozenset({b"zzz"})))
    assert read_offsets(nothing, 300) == ([], 0)
    assert nothing.offset == 300  # stepped over all of it
    log.close()


def test_filtered_cursor_starts_mid_chunk_and_stops_at_the_committed_end(tmp_path):
    log = write_groups(tmp_path, [(b"a", 40), (b"b", 40), (b"a", 40)])
    got, _ = read_offsets(StreamCursor(tmp_path, "/", "s", 25, StreamFilter(frozenset({b"a"}))), 120)
    assert got == list(range(25, 40)) + list(range(80, 120))
    # the last chunk reaches past the committed end: not stepped over (its records below the end
    # are read, for the exact check), nothing read past the end
    cursor = StreamCursor(tmp_path, "/", "s", 0, StreamFilter(frozenset({b"b"})))
    got, _ = read_offsets(cursor, 100)
    assert got == list(range(40, 100)) and cursor.offset == 100
    log.close()


def test_chunks_span_segments_and_files_without_side_file_are_read(tmp_path):
    log = write_groups(tmp_path, [(b"a", 30), (b"b", 30)] * 5, segment=2000)
    segs = list_segments(stream_root(tmp_path), "/", "s")
    assert len(segs) > 3
    got, _ = read_offsets(StreamCursor(tmp_path, "/", "s", 0, StreamFilter(frozenset({b"b"}))), 300)
    assert got == [o for o in range(300) if (o // 30) % 2 == 1]
    segs[0].path.with_suffix(".flt").unlink()  # no filter for a segment: read whole, nothing missed
    got, _ = read_offsets(StreamCursor(tmp_path, "/", "s", 0, StreamFilter(frozenset({b"b"}))), 300)
    assert [o for o in range(300) if (o // 30) % 2 == 1] == [o for o in got if (o // 30) % 2 == 1]
    log.close()


def test_recovery_drops_the_chunk_entries_of_a_torn_tail(tmp_path):
    log = write_groups(tmp_path, [(b"a", 20), (b"b", 20)])
    log.close()
    seg = list_segments(stream_root(tmp_path), "/", "s")[0].path
    chunks = read_chunks(seg)
    with open(seg, "r+b") as f:
        f.truncate(chunks[1].start + 10)  # the second chunk torn
        os.fsync(f.fileno())
    log = MirrorLog(stream_root(tmp_path), "/", "s")
    assert log.recover() == 20
    assert [(c.first, c.next) for c in read_chunks(seg)] == [(0, 20)]
    log.append_rows([row_of(MirrorRecord(T0, "rk", b"", b"x")) for _ in range(20)], [b"c"] * 20)
    log.flush()
    got, _ = read_offsets(StreamCursor(tmp_path, "/", "s", 0, StreamFilter(frozenset({b"c"}))), 40)
    assert got == list(range(20, 40))
    log.close()
