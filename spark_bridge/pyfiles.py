"""What a Spark executor needs of headrace, as one zip for ``--py-files`` (``addPyFile``).

An executor on a cluster's worker imports headrace to read a log (``datasource``, ``sources``,
``arrow_read``, ``remote`` and the mirror-log modules under ``persistence``) and to publish
(``replay_sink``, ``stream_sink``). A worker's Python seldom has headrace installed, but it has
pyarrow wherever PySpark's Arrow paths are used, and Spark puts its own pyspark on the Python
workers' path; this zip brings the rest: the pure-Python packages of headrace an executor imports
and the one third-party package they need (``sortedcontainers``). The C framing module is left
out (zipimport loads no extension modules): the pure-Python framing, which gives the same bytes,
runs in its place.

``headrace export|replay|stream-bridge --master spark://...`` ship it themselves; for a job of one's
own, ``python -m headrace.spark_bridge.pyfiles OUT.zip`` writes it, for ``spark-submit --py-files
OUT.zip``.
"""

from __future__ import annotations

import importlib.util
import sys
import zipfile
from pathlib import Path

__all__ = ["PACKAGES", "build_zip"]

# headrace's packages an executor imports (persistence's modules reach into queues and exchanges),
# and the third-party ones they need beyond pyspark and pyarrow
PACKAGES = ("headrace", "headrace.exchanges", "headrace.queues", "headrace.persistence", "headrace.spark_bridge",
            "sortedcontainers")


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise LookupError(f"package {name} is not installed")
    return Path(next(iter(spec.submodule_search_locations)))


def build_zip(out: Path) -> Path:
    """Writes the zip to ``out`` (replaced): each package's modules under its dotted name as a
    path, as a wheel lays them out (sub-packages are listed in ``PACKAGES`` themselves, so that an
    installed wheel's ``headrace`` gives its own modules only); returns ``out``."""
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".part")
    with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as zf:
        for name in PACKAGES:
            root = _package_dir(name)
            prefix = Path(*name.split("."))
            for source in sorted(root.glob("*.py")):
                zf.write(source, str(prefix / source.name))
    partial.replace(out)
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0].startswith("-"):
        print("usage: python -m headrace.spark_bridge.pyfiles OUT.zip   (a zip for spark-submit --py-files)",
              file=sys.stderr)
        return 2
    out = build_zip(Path(argv[0]))
    print(f"wrote {out} ({out.stat().st_size} bytes): give it to spark-submit --py-files")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
