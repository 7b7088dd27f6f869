"""How ``make test`` splits the suite between its two worker processes (pytest-xdist, ``-n 2``).

A share is a whole test file, except two that span files: every Spark test (tests/spark) is one
share, so the session starts one SparkSession and one standalone cluster, and every file with a
test that takes the ``browser`` fixture is one, so it starts one Chromium. A file runs in one
process, so its module-scoped broker starts once. The Spark share goes first (the collection puts
it first, tests/conftest.py): it is the longest, and the other worker goes through the rest
meanwhile."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

from xdist.scheduler import LoadScopeScheduling

SPARK = "tests/spark/"
# a function (test or fixture) with a parameter named browser, its parameter list over any lines
_TAKES_BROWSER = re.compile(r"def \w+\((?:[^()]|\([^()]*\))*?\bbrowser\b", re.S)


@cache
def _takes_browser(path: str) -> bool:
    try:
        return bool(_TAKES_BROWSER.search(Path(path).read_text()))
    except OSError:
        return False


def share_of(nodeid: str, root: Path) -> str:
    """The share of a test id (``tests/e2e/test_x.py::test_y[param]``)."""
    path = nodeid.split("::", 1)[0]
    if path.startswith(SPARK):
        return SPARK
    if _takes_browser(str(root / path)):
        return "browser"
    return path


class ShareScheduling(LoadScopeScheduling):
    """xdist's scope scheduling with ``share_of`` as the scope, in collection order."""

    def __init__(self, config, log=None) -> None:  # type: ignore[no-untyped-def]
        config.option.loadscopereorder = False  # keep the collection's order: the Spark share first
        super().__init__(config, log)
        self._root = Path(config.rootpath)

    def _split_scope(self, nodeid: str) -> str:
        return share_of(nodeid, self._root)
