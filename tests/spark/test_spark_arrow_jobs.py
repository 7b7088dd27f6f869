"""``export`` and ``replay`` on pyarrow (``spark_bridge/arrow_jobs.py``) give what Spark gives: the
same Parquet and JSON contents, partition directories and publishes; and the CLI picks that path
for a small log, reads over ``--url`` too, and runs Spark when told to."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from headrace.persistence.mirror_log import MirrorLog, MirrorRecord
from headrace.spark_bridge.arrow_jobs import export_arrow, replay_arrow, source_of, spark_hash
from headrace.spark_bridge.export import export
from headrace.spark_bridge.replay import replay

from test_spark_replay import Target

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

T0 = 1_765_000_000_000
KEYS = ["eu.1", "a/b c=%", "", "ünï.ç", "x\x1fy", "us.2", "#[x]"]


def write_log(root: Path, exchange: str = "orders", n: int = 400, numeric: bool = False) -> None:
    """``n`` records of every kind of key and meta; ``numeric``: bodies are the offsets (``Target``)."""
    log = MirrorLog(root, "/", exchange, segment_max_bytes=8192, index_interval_bytes=512)
    log.recover()
    log.append_many([MirrorRecord(T0 + i * 3_600_000 // 7 + (i % 3) * 1000, KEYS[i % len(KEYS)], b"",
                                  b"%d" % i if numeric else b"body-%d" % i + bytes(range(i % 40)),
                                  headers={"n": str(i), "q": 'a"\\\n\x01'} if i % 5 == 0 else None,
                                  content_type="text/plain" if i % 3 == 0 else None,
                                  message_id=f"m{i}" if i % 4 == 0 else None) for i in range(n)])
    log.close()


def test_spark_hash_is_sparks_hash(spark):
    from pyspark.sql import functions as F

    keys = KEYS + ["", "a", "ab", "abc", "abcd", "abcde", "é" * 7, "k." * 50, "\u20ac\u00ff"]
    got = spark.createDataFrame([(k,) for k in keys], "k string").select("k", F.hash("k").alias("h")).collect()
    assert [spark_hash(r.k) for r in got] == [r.h for r in got]


def _tree(root: Path) -> dict[str, list[str]]:
    """Each output directory's JSON lines (sorted), or its data files' count."""
    out: dict[str, list[str]] = {}
    for d in sorted({p.parent for p in root.rglob("part-*")}):
        lines = [line for f in sorted(d.glob("part-*.json")) for line in f.read_text().splitlines()]
        out[str(d.relative_to(root))] = sorted(lines)
    return out


@pytest.mark.parametrize("fmt,partition_by", [("parquet", None), ("json", None), ("parquet", "routing_key"),
                                              ("json", "date")])
def test_export_is_the_same_under_both_engines(spark, tmp_path, fmt, partition_by):
    write_log(tmp_path / "data")
    data = str(tmp_path / "data")
    a, b = tmp_path / "spark-out", tmp_path / "arrow-out"
    n = export(spark, data, "orders", out=str(a), fmt=fmt, partition_by=partition_by, from_offset=3, to_offset=390)
    m = export_arrow(source_of({"path": data, "exchange": "orders"}, "/", {"from_offset": 3, "to_offset": 390}),
                     out=str(b), fmt=fmt, partition_by=partition_by)
    assert n == m == 388
    assert (a / "_SUCCESS").exists() and (b / "_SUCCESS").exists()
    ta, tb = _tree(a), _tree(b)
    assert ta.keys() == tb.keys()
    if fmt == "json":
        assert ta == tb  # byte for byte, line for line
    else:
        ra = spark.read.parquet(str(a))
        rb = spark.read.parquet(str(b))
        assert ra.schema == rb.schema
        assert ra.orderBy("offset").collect() == rb.orderBy("offset").collect()
        fa, fb = next(a.rglob("*.parquet")), next(b.rglob("*.parquet"))
        assert pq.read_schema(fa).metadata[b"org.apache.spark.sql.parquet.row.metadata"] == \
            pq.read_schema(fb).metadata[b"org.apache.spark.sql.parquet.row.metadata"]
        assert pq.read_table(fa).schema == pq.read_table(fb).schema


def test_replay_publishes_the_same_under_both_engines(spark, broker):
    write_log(broker.data_dir, "replayed", n=300, numeric=True)
    a, b = Target(broker.url, "via-spark", "q-via-spark"), Target(broker.url, "via-arrow", "q-via-arrow")
    pa_, pb = broker.data_dir / "pa", broker.data_dir / "pb"
    common = {"amqp_url": broker.url, "routing_key_pattern": None, "rate": None, "partitions": 3, "window": 50,
              "dedup_header": "x-deduplication-header"}
    assert replay(spark, str(broker.data_dir), "replayed", to_exchange="via-spark", progress_dir=str(pa_),
                  **common) == 300
    assert replay_arrow(source_of({"path": str(broker.data_dir), "exchange": "replayed"}, "/", {}),
                        progress=str(pb), exchange="replayed", to_exchange="via-arrow", **common) == 300
    a.wait_count(300)
    b.wait_count(300)
    for t in (a, b):
        t.by_key = {}
        for rk, n, headers, _ in t.got:
            t.by_key.setdefault(rk, []).append((n, headers))
    assert a.by_key == b.by_key  # every key's messages, in order, with the same headers
    for part in range(3):  # the same keys in the same publishing partitions
        ka = {k for line in (pa_ / f"part-{part}.json").read_text().splitlines() for k in json.loads(line)["offsets"]}
        kb = {k for line in (pb / f"part-{part}.json").read_text().splitlines() for k in json.loads(line)["offsets"]}
        assert ka == kb and ka
    a.close()
    b.close()


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    return subprocess.run([sys.executable, "-m", "headrace", *args], capture_output=True, text=True, timeout=120,
                          env=env)


def test_cli_small_export_and_replay_over_url_run_on_arrow(broker, tmp_path):
    write_log(broker.data_dir, "small", n=1000, numeric=True)
    out = tmp_path / "out"
    r = cli("export", "--url", broker.http_url, "--exchange", "small", "--format", "json", "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert "exported 1000 rows" in r.stderr and "(pyarrow)" in " ".join(r.stderr.split())
    assert sum(len(f.read_text().splitlines()) for f in out.glob("part-*.json")) == 1000
    local = tmp_path / "local"
    r = cli("export", "--data-dir", str(broker.data_dir), "--exchange", "small", "--format", "json",
            "--out", str(local))
    assert r.returncode == 0, r.stderr
    assert _tree(out) == _tree(local)
    target = Target(broker.url, "small-again", "q-small-again")
    r = cli("replay", "--url", broker.http_url, "--user", "guest", "--password", "guest", "--exchange", "small",
            "--to-exchange", "small-again", "--amqp-url", broker.url, "--at-least-once",
            "--progress-dir", str(tmp_path / "p"))
    assert r.returncode == 0, r.stderr
    assert "replayed 1000 messages" in r.stderr
    target.wait_count(1000)
    target.close()
    r = cli("export", "--url", broker.http_url, "--user", "guest", "--password", "wrong", "--exchange", "small",
            "--out", str(tmp_path / "refused"))
    assert r.returncode == 1 and "refused" in r.stderr and "Traceback" not in r.stderr
