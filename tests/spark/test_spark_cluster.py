"""The streaming sink on a Spark standalone cluster (``standalone``: a master, two workers), as a
driver process of its own reading over the broker's HTTP API: ``headrace stream-bridge --master
spark://...`` SIGKILLed mid-batch and restarted publishes everything exactly once. (The batch jobs
on the cluster, README's ``spark-submit`` among them, are in ``test_spark_cluster_cli.py``.)"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from tcp_relay import Relay, via
from test_spark_replay import spark_env
from test_spark_stream_sink import Counter, drain, fill, target

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

BATCH = 300
BRIDGED = 5 * BATCH  # five micro-batches: a kill after one and half the next, the rest on the restart


def test_stream_bridge_on_the_cluster_killed_and_restarted_publishes_everything_once(standalone, broker, tmp_path):
    fill(broker, BRIDGED, exchange="events")
    url = target(broker, "events-copy", "events-copy-q", 2 * BATCH)
    checkpoint = tmp_path / "chk"  # the driver's: on this machine, as on a cluster's shared storage

    def cmd(*extra: str, amqp_url: str = broker.url) -> list[str]:
        return [sys.executable, "-m", "headrace", "stream-bridge", "--url", broker.http_url, "--exchange", "events",
                "--to-exchange", "events-copy", "--amqp-url", amqp_url, "--http-url", broker.http_url,
                "--checkpoint", str(checkpoint), "--max-records-per-trigger", str(BATCH),
                *standalone.submit_conf(), "--conf", "spark.cores.max=1", *extra]  # one executor: a sink's is enough

    # the executors publish through a relay that lets exactly a batch and a half through
    relay = Relay("127.0.0.1", broker.amqp_port, hold_after_publishes=BATCH + BATCH // 2)
    with open(tmp_path / "bridge.log", "w") as log:
        bridge = subprocess.Popen(cmd("--trigger-interval", "0", "--window", "4", amqp_url=via(broker.url, relay)),
                                  env=spark_env(), stdout=log, stderr=log, start_new_session=True)
        polled = Counter(url, "events-copy-q")
        try:
            deadline = time.monotonic() + 240
            while (n := polled()) < BATCH + BATCH // 2:  # a batch through, and half the next: the rest is held
                assert bridge.poll() is None, (tmp_path / "bridge.log").read_text()[-3000:]
                assert time.monotonic() < deadline, f"only {n} published"
                time.sleep(0.01)
        finally:
            os.killpg(bridge.pid, signal.SIGKILL)  # the driver; the master then stops its executors
            bridge.wait(10)
            polled.close()
            relay.close()  # what the executors still held is dropped with their connections
    # the restarted query publishes the killed batch again (it has no commit); the window drops its first half
    r = subprocess.run(cmd("--available-now"), env=spark_env(), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    got = drain(url, "events-copy-q")
    offsets = sorted(int(body.split(b"-")[0]) for _, body, _ in got)
    assert offsets == list(range(BRIDGED)), (len(offsets), len(set(offsets)))
    assert {h["x-deduplication-header"] for _, _, h in got} == {f"events:{i}" for i in range(BRIDGED)}
