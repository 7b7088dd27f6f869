"""iter_file_records reads a file in chunks (compaction must not hold a whole segment in RAM) and
yields exactly what iter_records yields over the whole file, for any chunk size."""

from __future__ import annotations

import random
from pathlib import Path

from headrace.persistence.records import encode_record, iter_file_records, iter_records


def records_blob(seed: int) -> bytes:
    rng = random.Random(seed)
    return b"".join(encode_record(rng.randrange(1, 8), rng.randbytes(rng.choice((0, 1, 7, 50, 300))))
                    for _ in range(200))


def test_chunked_reading_matches_whole_file_reading(tmp_path: Path) -> None:
    path = tmp_path / "seg"
    for seed in range(3):
        blob = records_blob(seed)
        torn = blob + encode_record(1, b"y" * 40)[:-5]  # torn tail: ignored
        corrupt = bytearray(blob)
        corrupt[len(blob) // 2] ^= 0xFF  # a bad record mid-file: nothing from it on
        for data in (blob, torn, bytes(corrupt)):
            path.write_bytes(data)
            want = list(iter_records(data))
            for chunk in (1, 9, 64, 1000, 1 << 20):
                assert list(iter_file_records(path, chunk)) == want
    assert len(list(iter_records(records_blob(0)))) == 200


def test_empty_file_yields_nothing(tmp_path: Path) -> None:
    path = tmp_path / "seg"
    path.write_bytes(b"")
    assert list(iter_file_records(path)) == []
