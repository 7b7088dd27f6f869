"""``headrace replay`` is exactly once by default: it refuses, in one line and before Spark starts, a
target exchange whose dedup window is missing, too small or reads another header; ``--at-least-once``
replays into such a target anyway, and says so."""

from __future__ import annotations

import subprocess

import httpx
import pika
import pytest
from test_spark_cli_errors import one_line_error, run
from test_spark_replay import spark_cli, spark_env

from headrace.cli.replay_check import dedup_problem
from headrace.persistence.mirror_log import MirrorLog, MirrorRecord

pytestmark = [pytest.mark.spark, pytest.mark.timeout(240)]


def declare(broker, name: str, **arguments) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    ch = conn.channel()
    ch.exchange_declare(name, "topic", durable=True, arguments=arguments or None)
    conn.close()


@pytest.fixture
def log_dir(tmp_path):
    log = MirrorLog(tmp_path, "/", "orders")
    log.recover()
    log.append_many([MirrorRecord(1_700_000_000_000 + i, f"k.{i % 3}", b"", b"m%d" % i) for i in range(50)])
    log.close()
    return tmp_path


def replay(broker, log_dir, target: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return run("replay", "--exchange", "orders", "--data-dir", str(log_dir), "--to-exchange", target,
               "--amqp-url", broker.url, "--http-url", broker.http_url, *extra)


def test_a_target_without_a_dedup_window_is_refused(broker, log_dir):
    declare(broker, "plain")
    line = one_line_error(replay(broker, log_dir, "plain"))
    assert "target exchange 'plain' has no dedup window (x-message-deduplication)" in line
    assert "-a x-cache-size=12000" in line and "--at-least-once" in line


def test_a_window_too_small_or_on_another_header_is_refused(broker, log_dir):
    declare(broker, "small", **{"x-message-deduplication": True, "x-cache-size": 100})
    line = one_line_error(replay(broker, log_dir, "small"))
    assert "keeps 100 dedup keys (x-cache-size), fewer than the 12000 (3 x 4 partitions x 1000 window)" in line
    assert dedup_problem(broker.http_url, "guest", "guest", "/", "small", partitions=2, window=10,
                         header="x-deduplication-header") is None  # 3 x 2 x 10 keys fit in 100
    declare(broker, "other-header", **{"x-message-deduplication": True, "x-cache-size": 12000,
                                       "x-deduplication-header": "x-my-key"})
    line = one_line_error(replay(broker, log_dir, "other-header"))
    assert "deduplicates on the header 'x-my-key', the replay sets 'x-deduplication-header'" in line


def test_the_window_a_policy_gives_counts(broker):
    declare(broker, "by-policy")
    api = httpx.Client(base_url=broker.http_url, auth=("guest", "guest"), timeout=10)
    api.put("/api/policies/%2F/dedup", json={"pattern": "^by-policy$", "apply-to": "exchanges", "definition": {
        "message-deduplication": True, "deduplication-cache-size": 500}}).raise_for_status()
    try:
        assert dedup_problem(broker.http_url, "guest", "guest", "/", "by-policy", partitions=2, window=50,
                             header="x-deduplication-header") is None
        assert "keeps 500 dedup keys" in (dedup_problem(broker.http_url, "guest", "guest", "/", "by-policy",
                                                         partitions=4, window=1000, header="x-deduplication-header") or "")
    finally:
        api.delete("/api/policies/%2F/dedup")


def test_the_http_api_out_of_reach_is_one_line_too(broker, log_dir):
    declare(broker, "plain2")
    line = one_line_error(run("replay", "--exchange", "orders", "--data-dir", str(log_dir), "--to-exchange", "plain2",
                              "--amqp-url", broker.url, "--http-url", "http://127.0.0.1:1"))
    assert "cannot check the target exchange's dedup window over the HTTP API at http://127.0.0.1:1" in line


def test_at_least_once_replays_into_a_target_without_a_window(broker, log_dir):
    declare(broker, "loose")
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    ch = conn.channel()
    ch.queue_declare("q-loose")
    ch.queue_bind("q-loose", "loose", "#")
    conn.close()  # an idle connection would miss its heartbeats during the Spark job
    r = subprocess.run(spark_cli("replay", "--exchange", "orders", "--data-dir", str(log_dir), "--to-exchange", "loose",
                                 "--amqp-url", broker.url, "--http-url", "http://127.0.0.1:1", "--at-least-once"),
                       env=spark_env(), capture_output=True, text=True, timeout=200)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "replaying at least once: a resumed replay may deliver messages twice" in r.stderr
    assert "replayed 50 messages" in r.stderr
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    assert conn.channel().queue_declare("q-loose", passive=True).method.message_count == 50
    conn.close()
