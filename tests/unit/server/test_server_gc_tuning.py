"""The broker's own process tunes its garbage collector once serving (``server/app.py``,
``tune_gc``): start-up's objects frozen out of the collector's sight, young collections every
``GC_YOUNG_THRESHOLD`` allocations. Checked in a fresh interpreter, as ``headrace serve`` runs."""

from __future__ import annotations

import json
import subprocess
import sys

from headrace.server.app import GC_YOUNG_THRESHOLD

SCRIPT = """
import gc, json
before = gc.get_threshold()
from headrace.server.app import tune_gc
frozen_before = gc.get_freeze_count()
tune_gc()
print(json.dumps({"before": before, "after": gc.get_threshold(), "frozen": [frozen_before, gc.get_freeze_count()]}))
"""


def test_tune_gc_freezes_start_up_and_raises_the_young_threshold_only() -> None:
    run = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, check=True)
    seen = json.loads(run.stdout)
    before, after = seen["before"], seen["after"]
    assert after == [GC_YOUNG_THRESHOLD, before[1], before[2]] and GC_YOUNG_THRESHOLD > before[0]
    assert seen["frozen"][0] == 0 and seen["frozen"][1] > 1_000  # the imported package, at least
