"""``headrace export`` and ``headrace replay`` with ``--master spark://...`` on the standalone cluster
(``standalone``: a master, two workers), reading over the broker's HTTP API, and README's
``spark-submit`` of ``examples/orders_by_key.py`` with ``--py-files``, whose result is also what a
local read of the data directory gives: in every one the executors' Python is a bare one with
pyarrow and nothing of headrace (``bare``), so they run on the headrace the job shipped them (the
commands' own zip, or ``python -m headrace.spark_bridge.pyfiles``), and both executors read. The
three drivers run side by side (``jobs``); each test checks one."""

from __future__ import annotations

import subprocess
import sys
import zlib
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pyarrow
import pyarrow.parquet as pq
import pytest
from pyspark.sql import functions as F
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


def _app(standalone, before: set[str], name: str) -> str:
    """The one application called ``name`` that started after ``before`` (the master's ids)."""
    state = standalone.state()
    apps = [a["id"] for a in state.get("activeapps", []) + state.get("completedapps", [])
            if a["id"] not in before and a["name"] == name]
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


@dataclass(slots=True)
class Job:
    """A finished driver: its output, its working directory and its application on the master."""

    result: subprocess.CompletedProcess[str]
    cwd: Path
    app: str
    out: Path


@pytest.fixture(scope="module")
def jobs(standalone, broker, bare, tmp_path_factory) -> dict[str, Job]:
    """The three drivers of this module (export, replay, the ``--py-files`` spark-submit), started
    together: each waits for its JVM while another's tasks run, and the master gives each in turn
    both workers (``spark.cores.max=2``, one core a worker; the first registered is served first),
    so each application still runs on both executors. Each test below checks one of them."""
    for exchange in ("exported", "replayed", "submitted"):
        fill(broker, N, exchange=exchange, size=SIZE)
    target(broker, "replayed-copy", "replayed-copy-q", 3 * 2 * 500)
    base = tmp_path_factory.mktemp("jobs")
    pyfiles = base / "headrace.zip"
    subprocess.run([sys.executable, "-m", "headrace.spark_bridge.pyfiles", str(pyfiles)], check=True)
    names = {"export": "headrace-export", "replay": "headrace-replay", "submit": "orders-by-key"}
    cmds = {
        "export": [*HEADRACE, "export", "--url", broker.http_url, "--exchange", "exported", "--out",
                   str(base / "export" / "out"), *standalone.submit_conf(), *SMALL_SPLITS,
                   "--conf", f"spark.app.name={names['export']}"],
        # the default progress directory, under the relative --data-dir, in its working directory
        "replay": [*HEADRACE, "replay", "--url", broker.http_url, "--exchange", "replayed",
                   "--to-exchange", "replayed-copy", "--amqp-url", broker.url, "--http-url", broker.http_url,
                   "--partitions", "2", "--window", "500", *standalone.submit_conf(), *SMALL_SPLITS,
                   "--conf", f"spark.app.name={names['replay']}"],
        "submit": [str(Path(sys.executable).parent / "spark-submit"), *standalone.submit_conf(), "--py-files",
                   str(pyfiles), str(ROOT / "examples" / "orders_by_key.py"), "--url", broker.http_url,
                   "--exchange", "submitted", "--partition-bytes", "262144", "--out", str(base / "submit" / "out")],
    }
    before = _apps(standalone)
    running = {}
    for name, cmd in cmds.items():
        (base / name).mkdir(exist_ok=True)
        running[name] = subprocess.Popen(cmd, env=bare.env(), cwd=base / name, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, text=True)
    done = {}
    for name, proc in running.items():
        try:
            stdout, stderr = proc.communicate(timeout=400)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        result = subprocess.CompletedProcess(cmds[name], proc.returncode, stdout, stderr)
        done[name] = Job(result, base / name, _app(standalone, before, names[name]), base / name / "out")
    return done


def test_export_on_the_cluster_reads_over_the_url(standalone, bare, jobs):
    job = jobs["export"]
    assert job.result.returncode == 0, job.result.stderr[-3000:]
    assert f"exported {N} rows to {job.out}" in " ".join(job.result.stderr.split())  # (rich wraps the line)
    table = pq.read_table(job.out, columns=["offset", "routing_key", "body"])
    assert sorted(table.column("offset").to_pylist()) == list(range(N))
    for offset, key, body in zip(*(table.column(c).to_pylist() for c in ("offset", "routing_key", "body"))):
        assert (key, body) == (f"k.{offset % 5}", _body(offset))
    _ran_on_both_workers(standalone, bare, job.app)


def test_replay_on_the_cluster_delivers_every_message_once_in_order_per_key(standalone, broker, bare, jobs):
    job = jobs["replay"]
    assert job.result.returncode == 0, job.result.stderr[-3000:]
    assert f"replayed {N} messages" in " ".join(job.result.stderr.split())
    got = drain(broker.url, "replayed-copy-q")
    offsets = [int(body.split(b"-")[0]) for _, body, _ in got]
    assert sorted(offsets) == list(range(N)), (len(offsets), len(set(offsets)))
    per_key: dict[str, list[int]] = defaultdict(list)
    for (key, body, headers), offset in zip(got, offsets):
        assert (key, body, headers["x-deduplication-header"]) == (f"k.{offset % 5}", _body(offset), f"replayed:{offset}")
        per_key[key].append(offset)
    assert sorted(per_key) == KEYS and all(o == sorted(o) for o in per_key.values())
    [progress] = (job.cwd / "headrace-data" / "replay-progress").iterdir()
    assert (progress / "finished").exists()
    _ran_on_both_workers(standalone, bare, job.app)


def test_spark_submit_with_py_files_reads_over_the_url_what_a_local_read_gives(spark, standalone, broker, bare,
                                                                                jobs):
    """README's ``spark-submit`` of ``examples/orders_by_key.py`` where headrace is not installed:
    its per-key counts, body bytes and body CRCs are what the bodies give, and what a local read of
    the broker's data directory gives, with both executors reading."""
    job = jobs["submit"]
    assert job.result.returncode == 0, job.result.stderr[-3000:]
    assert f"wrote 5 routing keys, {N} messages to {job.out}" in job.result.stdout
    want = {k: (0, 0, 0) for k in KEYS}
    for i in range(N):
        n, size, crc = want[f"k.{i % 5}"]
        want[f"k.{i % 5}"] = (n + 1, size + len(_body(i)), crc + zlib.crc32(_body(i)))
    got = pq.read_table(job.out).to_pylist()
    assert {row["routing_key"]: (row["messages"], row["body_bytes"], row["body_crc"]) for row in got} == want
    local = spark.read.format("headrace").option("path", str(broker.data_dir)).option("exchange", "submitted") \
        .load().groupBy("routing_key").agg(F.count("*").alias("messages"),
                                           F.sum(F.length("body")).alias("body_bytes"),
                                           F.sum(F.crc32("body")).alias("body_crc"))
    assert sorted(spark.read.parquet(str(job.out)).collect()) == sorted(local.collect())
    _ran_on_both_workers(standalone, bare, job.app)
