"""Every metrics endpoint of a real broker, after real traffic, passes ``promtool check metrics``
(Prometheus' own promtool, which ``make test`` takes out of Debian's package, and
``exposition_lint``'s account of its checks); ``/metrics/detailed`` answers the families a
scrape names, as RabbitMQ's plugin does; a queue's ``message_bytes_paged_out`` is its spilled bytes."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import httpx
import pika
import pytest
from e2e_support import unique
from exposition_lint import problems

pytestmark = pytest.mark.timeout(60)

# every endpoint on: the management port's /metrics by queue, the plugin's port; 16 resident
# messages a queue (the smallest allowed), so a few publishes spill
BROKER_ENV = {"HEADRACE_PROMETHEUS_PORT": "0", "HEADRACE_METRICS": "per-queue",
              "HEADRACE_QUEUE_MAX_RESIDENT_MESSAGES": "16"}
BODY = b"x" * 100
PROMTOOL = Path(__file__).resolve().parents[2] / "build" / "promtool" / "promtool"  # `make test` puts it there


def _scrape(url: str) -> str:
    r = httpx.get(url, timeout=10)
    assert r.status_code == 200, (url, r.status_code, r.text[:200])
    assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
    return r.text


def _promtool(text: str) -> str:
    """What ``promtool check metrics`` reports of a scrape (it exits 0 when it has nothing to say)."""
    done = subprocess.run([str(PROMTOOL), "check", "metrics"], input=text.encode(), capture_output=True, timeout=30)
    return "" if done.returncode == 0 else (done.stdout + done.stderr).decode() or f"exit {done.returncode}"


def _traffic(broker) -> str:
    """A queue with spilled messages, an unacked delivery, a consumer and an unroutable publish."""
    q = unique("expo")
    with pika.BlockingConnection(pika.URLParameters(broker.url)) as conn:
        ch = conn.channel()
        ch.queue_declare(q)
        for _ in range(40):
            ch.basic_publish("", q, BODY)
        ch.basic_publish("amq.direct", "nowhere", b"dropped")
        ch.basic_get(q)
    return q


def test_every_metrics_endpoint_passes_promtools_checks(broker, broker_factory):
    _traffic(broker)
    prom = f"http://127.0.0.1:{broker.ports['prometheus']}"
    detailed = ("/metrics/detailed?family=queue_coarse_metrics&family=queue_consumer_count"
                "&family=queue_metrics&family=connection_churn_metrics")
    for url in (f"{broker.http_url}/metrics", f"{prom}/metrics", f"{prom}/metrics/per-object", f"{prom}{detailed}",
                f"{prom}/metrics/detailed"):
        text = _scrape(url)
        assert (problems(text), _promtool(text)) == ([], ""), url
    aggregate = broker_factory(env={"HEADRACE_METRICS": "aggregate"})
    _traffic(aggregate)
    text = _scrape(f"{aggregate.http_url}/metrics")
    assert (problems(text), _promtool(text)) == ([], "")


def test_promtool_reports_what_it_should():
    """The check above can fail: promtool refuses a counter without ``_total`` (the old
    ``headrace_store_synced_ticket``), as the lint does."""
    bad = "# HELP headrace_store_synced_ticket x\n# TYPE headrace_store_synced_ticket counter\nheadrace_store_synced_ticket 1\n"
    assert "_total" in _promtool(bad) and problems(bad) != []


def test_synced_publishes_are_a_counter_named_total(broker):
    text = _scrape(f"{broker.http_url}/metrics")
    assert "# TYPE headrace_store_synced_total counter" in text
    assert "headrace_store_synced_ticket" not in text


def test_detailed_answers_the_families_asked_for_as_the_plugin_does(broker, http):
    q = _traffic(broker)
    vh = unique("dvh")
    assert http.put(f"/api/vhosts/{vh}").status_code in (201, 204)
    http.put(f"/api/permissions/{vh}/guest", json={"configure": ".*", "write": ".*", "read": ".*"})
    other = unique("dq")
    http.put(f"/api/queues/{vh}/{other}", json={"durable": False})
    prom = f"http://127.0.0.1:{broker.ports['prometheus']}"
    r = httpx.get(f"{prom}/metrics/detailed", params=[("family", "queue_coarse_metrics")], timeout=10,
                  auth=("nobody", "wrong"))  # no credentials, as /metrics
    assert r.status_code == 200
    names = {line.split("{")[0].split()[0] for line in r.text.splitlines() if not line.startswith("#")}
    assert names == {"rabbitmq_detailed_queue_messages_ready", "rabbitmq_detailed_queue_messages_unacked",
                     "rabbitmq_detailed_queue_messages", "rabbitmq_identity_info"}
    assert f'rabbitmq_detailed_queue_messages_ready{{vhost="/",queue="{q}"}} ' in r.text
    assert f'queue="{other}"' in r.text
    text = httpx.get(f"{prom}/metrics/detailed?family=queue_consumer_count&vhost={vh}", timeout=10).text
    assert f'rabbitmq_detailed_queue_consumers{{vhost="{vh}",queue="{other}"}} 0' in text
    assert f'queue="{q}"' not in text  # another vhost's queue
    text = httpx.get(f"{prom}/metrics/detailed?family=connection_churn_metrics", timeout=10).text
    assert "# TYPE rabbitmq_detailed_connections_opened_total counter" in text
    only_identity = httpx.get(f"{prom}/metrics/detailed", timeout=10).text
    assert [ln for ln in only_identity.splitlines() if not ln.startswith("#")][0].startswith("rabbitmq_identity_info{")
    http.delete(f"/api/vhosts/{vh}")


def test_message_bytes_paged_out_are_the_spilled_bytes(broker, http):
    q = _traffic(broker)  # 40 ready of 100 bytes (the got one back with its connection), 16 of them resident
    deadline = time.monotonic() + 10
    while True:
        info = http.get(f"/api/queues/%2F/{q}").json()
        if info["messages_paged_out"] > 0 or time.monotonic() > deadline:
            break
    assert info["messages_paged_out"] > 0
    assert info["message_bytes_paged_out"] == info["messages_paged_out"] * len(BODY)
    assert info["message_bytes_ram"] == info["message_bytes"] - info["message_bytes_paged_out"]
    text = _scrape(f"http://127.0.0.1:{broker.ports['prometheus']}/metrics/per-object")
    assert (f'rabbitmq_queue_messages_paged_out_bytes{{vhost="/",queue="{q}"}} '
            f'{info["messages_paged_out"] * len(BODY)}') in text
