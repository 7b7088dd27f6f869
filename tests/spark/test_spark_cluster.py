"""Jobs on a Spark standalone cluster (``standalone``: a master, two workers) run as driver processes
of their own: README's ``spark-submit`` of ``examples/orders_by_key.py``, reading over the broker's
HTTP API only, gives what a local read of the data directory gives, with both executors reading;
``headrace stream-bridge --master spark://...`` SIGKILLed mid-batch and restarted publishes
everything exactly once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pyspark.sql import functions as F
from test_spark_replay import spark_env
from test_spark_stream_sink import Counter, drain, fill, target

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[2]
N, BATCH = 6000, 300
BRIDGED = 3000  # ten micro-batches: a kill after three and part of one, seven more on the restart


def test_spark_submit_reads_over_the_url_on_both_executors(spark, standalone, broker, tmp_path):
    fill(broker, N, size=100)
    out = tmp_path / "by-key"
    r = subprocess.run([str(Path(sys.executable).parent / "spark-submit"), *standalone.submit_conf(),
                        str(ROOT / "examples" / "orders_by_key.py"), "--url", broker.http_url, "--exchange", "orders",
                        "--out", str(out), "--partition-bytes", "65536"],
                       env=spark_env(), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert f"wrote 5 routing keys, {N} messages to {out}" in r.stdout
    local = spark.read.format("headrace").option("path", str(broker.data_dir)).option("exchange", "orders").load() \
        .groupBy("routing_key").agg(F.count("*").alias("messages"), F.sum(F.length("body")).alias("body_bytes"),
                                    F.sum(F.crc32("body")).alias("body_crc"))
    assert sorted(spark.read.parquet(str(out)).collect()) == sorted(local.collect())
    apps = [a for a in standalone.state()["completedapps"] if a["name"] == "orders-by-key"]
    assert len(apps) == 1
    tasks = standalone.tasks_per_executor(apps[0]["id"])
    assert len(tasks) == 2 and {k.split("/")[0] for k in tasks} == {"work0", "work1"}, tasks
    assert all(n > 0 for n in tasks.values()), tasks


def test_stream_bridge_on_the_cluster_killed_and_restarted_publishes_everything_once(standalone, broker, tmp_path):
    fill(broker, BRIDGED, exchange="events")
    url = target(broker, "events-copy", "events-copy-q", 2 * BATCH)
    checkpoint = tmp_path / "chk"  # the driver's: on this machine, as on a cluster's shared storage

    def cmd(*extra: str) -> list[str]:
        return [sys.executable, "-m", "headrace", "stream-bridge", "--url", broker.http_url, "--exchange", "events",
                "--to-exchange", "events-copy", "--amqp-url", broker.url, "--http-url", broker.http_url,
                "--checkpoint", str(checkpoint), "--max-records-per-trigger", str(BATCH),
                *standalone.submit_conf(), *extra]

    with open(tmp_path / "bridge.log", "w") as log:
        bridge = subprocess.Popen(cmd("--trigger-interval", "0", "--window", "4"), env=spark_env(), stdout=log,
                                  stderr=log, start_new_session=True)
        polled = Counter(url, "events-copy-q")
        try:
            deadline = time.monotonic() + 240
            while True:  # a few batches in, and part of one
                n = polled()
                if n >= 3 * BATCH and n % BATCH:
                    break
                assert bridge.poll() is None, (tmp_path / "bridge.log").read_text()[-3000:]
                assert time.monotonic() < deadline and n < BRIDGED, f"never caught mid-batch ({n})"
                time.sleep(0.005)
        finally:
            os.killpg(bridge.pid, signal.SIGKILL)  # the driver; the master then stops its executors
            bridge.wait(10)
            polled.close()
    # the killed driver's executors may still finish the batch they were publishing: the restarted
    # query publishes it again all the same (it has no commit), and the window drops it
    r = subprocess.run(cmd("--available-now"), env=spark_env(), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    got = drain(url, "events-copy-q")
    offsets = sorted(int(body.split(b"-")[0]) for _, body, _ in got)
    assert offsets == list(range(BRIDGED)), (len(offsets), len(set(offsets)))
    assert {h["x-deduplication-header"] for _, _, h in got} == {f"events:{i}" for i in range(BRIDGED)}
