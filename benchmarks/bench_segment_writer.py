"""The message store's segment writer against an earlier revision of it, alternated.

    git show REV:persistence/segments.py > /tmp/old_segments.py
    .venv/bin/python benchmarks/bench_segment_writer.py /tmp/old_segments.py

Appends 256-byte publishes in groups of 1, 100 and 1000 records with a flush (no fsync) after
each group; prints the best records/s of 4 alternated runs per writer.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

from headrace.persistence import segments as new_segments

META = b"m" * 60
BODY = bytes(256)


def load_old(path: str) -> ModuleType:
    source = Path(path).read_text().replace("from .", "from headrace.persistence.")
    module = ModuleType("old_segments")
    exec(compile(source, path, "exec"), module.__dict__)  # noqa: S102 - our own file, for a comparison
    return module


def run(mod: ModuleType, directory: str, groups: int, per: int) -> float:
    w = mod.SegmentWriter(Path(directory), 1)
    start = time.perf_counter()
    for _ in range(groups):
        for _ in range(per):
            w.append(1, (META, b"\x10\x00\x02", BODY))
        w.flush()
    took = time.perf_counter() - start
    w.close()
    os.unlink(w.path)
    return groups * per / took


def main() -> None:
    writers = {"old": load_old(sys.argv[1]), "new": new_segments} if len(sys.argv) > 1 else {"new": new_segments}
    for per in (1, 100, 1000):
        best: dict[str, float] = {name: 0.0 for name in writers}
        for _ in range(4):
            for name, mod in writers.items():
                with tempfile.TemporaryDirectory() as d:
                    best[name] = max(best[name], run(mod, d, 50_000 if per == 1 else 200_000 // per, per))
        print(per, {k: round(v) for k, v in best.items()}, flush=True)


if __name__ == "__main__":
    main()
