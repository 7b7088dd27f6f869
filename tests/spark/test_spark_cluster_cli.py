"""``headrace export`` and ``headrace replay`` with ``--master spark://...`` on the standalone cluster
(``standalone``: a master, two workers), reading over the broker's HTTP API, and a ``spark-submit``
of ``examples/orders_by_key.py`` with ``--py-files``: in every one the executors' Python is a bare
one with pyarrow and nothing of headrace (``bare``), so they run on the headrace the job shipped
them (the commands' own zip, or ``python -m headrace.spark_bridge.pyfiles``)."""

from __future__ import annotations

import subprocess
import sys
import zlib
from collections import defaultdict
from pathlib import Path

import pyarrow
import pyarrow.parquet as pq
import pytest
from standalone import SPARK_HOME
from test_spark_replay import spark_env
from test_spark_stream_sink import drain, fill, target

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[2]
N, SIZE = 6000, 100
KEYS = [f"k.{i}" for i in range(5)]  # fill's routing keys, k.<offset % 5>
HEADRACE = [sys.executable, "-m", "headrace"]
# ranges of 256 KiB (the CLI splits as Spark's file sources do): a few tasks for the two executors
SMALL_SPLITS = ["--conf", "spark.sql.files.maxPartitionBytes=262144"]

SITECUSTOMIZE = '''import os
_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "started")
os.makedirs(_dir, exist_ok=True)
with open(os.path.join(_dir, str(os.getpid())), "w") as _f:
    _f.write(os.getcwd())
'''


WORKERS_PYTHON = """#!/bin/sh
# One path, two machines: in a worker's work dir (an executor's Python workers) the workers' Python,
# elsewhere (the driver's machine, where headrace is installed) this venv's
case "$(pwd -P)/" in
  {work}/*) exec {bare} "$@" ;;
esac
exec {venv} "$@"
"""


class Bare:
    """A venv of this interpreter whose site-packages holds a link to pyarrow and nothing else: no
    headrace, none of its dependencies (Spark adds its own pyspark to its Python workers' path).
    Its ``sitecustomize`` writes each start's working directory to ``started/<pid>``: an executor's
    is its directory in its worker's work dir, so a test sees which executors ran this Python.

    ``machine_python`` is the ``PYSPARK_PYTHON`` of the jobs: as on a real cluster one path names
    a different Python on the workers than on the driver's machine. The Python processes the
    driver starts (its planning of the data source's partitions) have headrace, as the machine a
    user runs ``headrace`` on has; the executors' have only what the job ships them."""

    def __init__(self, base: Path, work: Path) -> None:
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(base)], check=True)
        self.python = base / "bin" / "python"
        self.site = Path(subprocess.run([str(self.python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                                        check=True, capture_output=True, text=True).stdout.strip())
        (self.site / "pyarrow").symlink_to(Path(pyarrow.__file__).parent)
        (self.site / "sitecustomize.py").write_text(SITECUSTOMIZE)
        self.machine_python = base / "bin" / "machine-python"
        self.machine_python.write_text(WORKERS_PYTHON.format(work=work.resolve(), bare=self.python,
                                                             venv=sys.executable))
        self.machine_python.chmod(0o755)

    def starts(self) -> set[str]:
        """Working directories of every start so far."""
        started = self.site / "started"
        return {p.read_text() for p in started.iterdir()} if started.is_dir() else set()

    def env(self) -> dict[str, str]:
        # SPARK_HOME for spark-submit, which otherwise looks for pyspark in PYSPARK_PYTHON's packages
        return {**spark_env(), "PYSPARK_PYTHON": str(self.machine_python), "SPARK_HOME": str(SPARK_HOME)}


@pytest.fixture(scope="module")
def bare(standalone, tmp_path_factory) -> Bare:
    return Bare(tmp_path_factory.mktemp("bare") / "venv", standalone.base)


def test_the_bare_python_has_pyarrow_but_no_headrace(bare, tmp_path):
    """What the jobs below run on: without the zip they ship, this Python cannot import headrace."""
    # (not from the checkout's root, whose headrace/ directory `-c` would find)
    r = subprocess.run([str(bare.python), "-c", "import pyarrow; import headrace"], capture_output=True, text=True,
                       cwd=tmp_path)
    assert r.returncode == 1 and "ModuleNotFoundError: No module named 'headrace'" in r.stderr, r.stderr
    r = subprocess.run([str(bare.python), "-c", "import sortedcontainers"], capture_output=True, text=True,
                       cwd=tmp_path)
    assert "No module named 'sortedcontainers'" in r.stderr, r.stderr


def _new_app(standalone, before: set[str]) -> str:
    state = standalone.state()
    apps = [a["id"] for a in state.get("activeapps", []) + state.get("completedapps", []) if a["id"] not in before]
    assert len(apps) == 1, state
    return str(apps[0])


def _apps(standalone) -> set[str]:
    state = standalone.state()
    return {a["id"] for a in state.get("activeapps", []) + state.get("completedapps", [])}


def _ran_on_both_workers(standalone, bare: Bare, app: str) -> None:
    tasks = standalone.tasks_per_executor(app)
    assert {k.split("/")[0] for k in tasks} == {"work0", "work1"} and all(n > 0 for n in tasks.values()), tasks
    # the Python workers of both executors were the bare Python
    started = {Path(cwd).relative_to(standalone.base).parts[0] for cwd in bare.starts()
               if Path(cwd).is_relative_to(standalone.base / "work0" / app)
               or Path(cwd).is_relative_to(standalone.base / "work1" / app)}
    assert started == {"work0", "work1"}, bare.starts()


def _body(offset: int) -> bytes:
    return b"%d-" % offset + b"x" * SIZE


def test_export_on_the_cluster_reads_over_the_url(standalone, broker, bare, tmp_path):
    fill(broker, N, exchange="exported", size=SIZE)
    out = tmp_path / "out"
    before = _apps(standalone)
    r = subprocess.run([*HEADRACE, "export", "--url", broker.http_url, "--exchange", "exported", "--out", str(out),
                        *standalone.submit_conf(), *SMALL_SPLITS], env=bare.env(), cwd=tmp_path,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert f"exported {N} rows to {out}" in " ".join(r.stderr.split())  # (rich wraps the line)
    table = pq.read_table(out, columns=["offset", "routing_key", "body"])
    assert sorted(table.column("offset").to_pylist()) == list(range(N))
    for offset, key, body in zip(*(table.column(c).to_pylist() for c in ("offset", "routing_key", "body"))):
        assert (key, body) == (f"k.{offset % 5}", _body(offset))
    _ran_on_both_workers(standalone, bare, _new_app(standalone, before))


def test_replay_on_the_cluster_delivers_every_message_once_in_order_per_key(standalone, broker, bare, tmp_path):
    fill(broker, N, exchange="replayed", size=SIZE)
    url = target(broker, "replayed-copy", "replayed-copy-q", 3 * 2 * 500)
    before = _apps(standalone)
    # the default progress directory, under the relative --data-dir, in this working directory
    r = subprocess.run([*HEADRACE, "replay", "--url", broker.http_url, "--exchange", "replayed",
                        "--to-exchange", "replayed-copy", "--amqp-url", broker.url, "--http-url", broker.http_url,
                        "--partitions", "2", "--window", "500", *standalone.submit_conf(), *SMALL_SPLITS],
                       env=bare.env(), cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert f"replayed {N} messages" in " ".join(r.stderr.split())
    got = drain(url, "replayed-copy-q")
    offsets = [int(body.split(b"-")[0]) for _, body, _ in got]
    assert sorted(offsets) == list(range(N)), (len(offsets), len(set(offsets)))
    per_key: dict[str, list[int]] = defaultdict(list)
    for (key, body, headers), offset in zip(got, offsets):
        assert (key, body, headers["x-deduplication-header"]) == (f"k.{offset % 5}", _body(offset), f"replayed:{offset}")
        per_key[key].append(offset)
    assert sorted(per_key) == KEYS and all(o == sorted(o) for o in per_key.values())
    [job] = (tmp_path / "headrace-data" / "replay-progress").iterdir()
    assert (job / "finished").exists()
    _ran_on_both_workers(standalone, bare, _new_app(standalone, before))


def test_spark_submit_with_py_files_runs_where_headrace_is_not_installed(standalone, broker, bare, tmp_path):
    fill(broker, N, exchange="submitted", size=SIZE)
    pyfiles = tmp_path / "headrace.zip"
    subprocess.run([sys.executable, "-m", "headrace.spark_bridge.pyfiles", str(pyfiles)], check=True)
    spark_submit = str(Path(sys.executable).parent / "spark-submit")
    job = [str(ROOT / "examples" / "orders_by_key.py"), "--url", broker.http_url, "--exchange", "submitted",
           "--partition-bytes", "262144"]
    out = tmp_path / "by-key"
    before = _apps(standalone)
    r = subprocess.run([spark_submit, *standalone.submit_conf(), "--py-files", str(pyfiles), *job, "--out", str(out)],
                       env=bare.env(), cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert f"wrote 5 routing keys, {N} messages to {out}" in r.stdout
    want = {k: (0, 0, 0) for k in KEYS}
    for i in range(N):
        n, size, crc = want[f"k.{i % 5}"]
        want[f"k.{i % 5}"] = (n + 1, size + len(_body(i)), crc + zlib.crc32(_body(i)))
    got = pq.read_table(out).to_pylist()
    assert {row["routing_key"]: (row["messages"], row["body_bytes"], row["body_crc"]) for row in got} == want
    _ran_on_both_workers(standalone, bare, _new_app(standalone, before))
