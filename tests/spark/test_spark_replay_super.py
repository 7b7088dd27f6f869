"""``headrace replay --super-stream``: every partition stream replayed once, each key in order (a key
lives in one partition), each partition with progress of its own, so a run again (under either
engine) sends nothing."""

from __future__ import annotations

import subprocess

import httpx
import pika
import pytest
from test_spark_replay import spark_cli, spark_env

pytestmark = [pytest.mark.spark, pytest.mark.timeout(400)]

KEYS, PER_KEY = 12, 5


def test_replay_of_a_super_stream_keeps_each_key_in_order_and_resumes_per_partition(broker_factory, tmp_path):
    proc = broker_factory()
    api = httpx.Client(base_url=proc.http_url, auth=("guest", "guest"), timeout=10)
    api.put("/api/super-streams/%2F/inv", json={"partitions": 3}).raise_for_status()
    conn = pika.BlockingConnection(pika.URLParameters(proc.url))
    ch = conn.channel()
    ch.confirm_delivery()
    for n in range(PER_KEY):
        for k in range(KEYS):
            ch.basic_publish("inv", f"customer-{k}", f"{k}:{n}".encode())
    ch.exchange_declare("again", "topic", durable=True, arguments={"x-message-deduplication": True,
                                                                   "x-cache-size": 10_000})
    ch.queue_declare("again-q", durable=True)
    ch.queue_bind("again-q", "again", "#")
    conn.close()
    holding = [q["name"] for q in api.get("/api/queues/%2F").json() if q["name"].startswith("inv-")
               and q["messages"]]
    assert len(holding) > 1  # the keys spread over the partitions

    args = spark_cli("replay", "--data-dir", str(proc.data_dir), "--super-stream", "inv", "--to-exchange", "again",
                     "--amqp-url", proc.url, "--http-url", proc.http_url, "--progress-dir", str(tmp_path / "progress"),
                     "--partitions", "2", "--window", "10")
    r = subprocess.run(args, env=spark_env(), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert f"replayed {KEYS * PER_KEY} messages" in r.stderr
    assert sorted(p.name for p in (tmp_path / "progress").iterdir()) == ["inv-0", "inv-1", "inv-2"]

    conn = pika.BlockingConnection(pika.URLParameters(proc.url))
    ch = conn.channel()
    got: dict[str, list[int]] = {}
    sources = set()
    while (m := ch.basic_get("again-q", auto_ack=True))[0] is not None:
        k, n = m[2].decode().split(":")
        got.setdefault(k, []).append(int(n))
        sources.add(m[1].headers["x-replayed-from"].split(":")[0])
        assert m[0].routing_key == f"customer-{k}"
    assert got == {str(k): list(range(PER_KEY)) for k in range(KEYS)}  # each once, in order
    assert sources == set(holding)

    # run again on the Arrow engine (no second JVM to start): it reads the same per-partition
    # progress files the Spark run wrote, as a resume under either engine does
    r = subprocess.run([*args, "--engine", "arrow"], env=spark_env(), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "replayed 0 messages (pyarrow)" in r.stderr  # every partition's progress says all were confirmed
    assert ch.queue_declare("again-q", passive=True).method.message_count == 0
    conn.close()

    both = subprocess.run(spark_cli("replay", "--data-dir", str(proc.data_dir), "--super-stream", "inv",
                                    "--stream", "inv-0", "--amqp-url", proc.url), env=spark_env(),
                          capture_output=True, text=True, timeout=60)
    assert both.returncode == 2 and "give one of --exchange, --stream or --super-stream" in both.stderr
