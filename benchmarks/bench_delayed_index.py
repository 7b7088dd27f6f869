"""Memory of the message store's delayed-message index (``persistence/store_delayed.py``) with
millions of persistent delayed messages held, measured with tracemalloc.

    .venv/bin/python benchmarks/bench_delayed_index.py [--messages 2000000] [--against REV]

Ids are every other one (publishes to queues take the ids between) and about 90,000 Delay
records fill a 32 MiB segment. ``--against REV`` measures the same with ``store_delayed.py`` as
it was at git revision REV too (read with ``git show``), for a before/after on one machine.
Prints one line per index: MiB in all and bytes per message.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import subprocess
import sys
import tempfile
import tracemalloc
from pathlib import Path
from typing import Any

from headrace.persistence.store_delayed import DelayedIndex


def measure(cls: Any, n: int) -> float:
    gc.collect()
    tracemalloc.start()
    idx = cls()
    base = tracemalloc.get_traced_memory()[0]
    for mid in range(1, n + 1):
        idx.delay(mid * 2, mid // 90_000, 350)
    used = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    return float(used)


def old_index(rev: str) -> Any:
    root = Path(__file__).resolve().parent.parent
    src = subprocess.run(["git", "show", f"{rev}:persistence/store_delayed.py"], cwd=root, check=True,
                         capture_output=True, text=True).stdout
    src = src.replace("from .store_index import", "from headrace.persistence.store_index import")
    path = Path(tempfile.mkdtemp(prefix="bench-delayed-index-")) / "old_store_delayed.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("old_store_delayed", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["old_store_delayed"] = module
    spec.loader.exec_module(module)
    path.unlink()
    path.parent.rmdir()
    return module.DelayedIndex


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=2_000_000)
    ap.add_argument("--against", default=None)
    args = ap.parse_args()
    indexes = [("this tree", DelayedIndex)]
    if args.against:
        indexes.append((args.against, old_index(args.against)))
    for name, cls in indexes:
        used = measure(cls, args.messages)
        print(f"{name}: {args.messages} held, {used / 2**20:.1f} MiB, {used / args.messages:.2f} B/message")


if __name__ == "__main__":
    main()
