"""The rabbitmq_prometheus plugin's endpoint on its own port: a real broker, pika traffic, and the
scrape read by the Prometheus client library's own parser, as a Prometheus server would read it."""

from __future__ import annotations

import signal

import httpx
import pika
import pytest
from e2e_support import unique
from prometheus_client.parser import text_string_to_metric_families

pytestmark = pytest.mark.timeout(60)

BROKER_ENV = {"HEADRACE_PROMETHEUS_PORT": "0"}


def scrape(broker, path: str = "/metrics") -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """Family -> {sorted labels: value}; counters under their sample name (``..._total``)."""
    response = httpx.get(f"http://127.0.0.1:{broker.ports['prometheus']}{path}", timeout=10)
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/plain; version=0.0.4"
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            if sample.name.endswith("_created"):  # the parser's own companion of a counter
                continue
            out.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return out


def value(metrics: dict, name: str, **labels: str) -> float:
    return metrics[name][tuple(sorted(labels.items()))]


CLASSIC = {"protocol": "amqp091", "queue_type": "rabbit_classic_queue"}


def test_totals_follow_the_traffic(broker, ch) -> None:
    """Each publish, route, drop, confirm, get and delivery moves its RabbitMQ counter by one."""
    q = unique("prom")
    ch.queue_declare(q)
    before = scrape(broker)
    for _ in range(5):
        ch.basic_publish("", q, b"m")
    ch.basic_publish("amq.direct", "nowhere", b"dropped")
    ch.confirm_delivery()
    ch.basic_publish("", q, b"confirmed")
    method, _, _ = ch.basic_get(q)
    ch.basic_ack(method.delivery_tag)
    ch.basic_get(q, auto_ack=True)
    got: list[bytes] = []
    tag = ch.basic_consume(q, lambda c, m, p, body: (got.append(body), c.basic_ack(m.delivery_tag)))
    while len(got) < 4:
        ch.connection.process_data_events(time_limit=0.2)
    ch.basic_cancel(tag)
    after = scrape(broker)

    def moved(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert moved("rabbitmq_global_messages_received_total", protocol="amqp091") == 7
    assert moved("rabbitmq_global_messages_routed_total", protocol="amqp091") == 6
    assert moved("rabbitmq_global_messages_unroutable_dropped_total", protocol="amqp091") == 1
    assert moved("rabbitmq_global_messages_confirmed_total", protocol="amqp091") == 1
    assert moved("rabbitmq_global_messages_delivered_total", **CLASSIC) == 6
    assert moved("rabbitmq_global_messages_delivered_get_manual_ack_total", **CLASSIC) == 1
    assert moved("rabbitmq_global_messages_delivered_get_auto_ack_total", **CLASSIC) == 1
    assert moved("rabbitmq_global_messages_delivered_consume_manual_ack_total", **CLASSIC) == 4
    assert moved("rabbitmq_global_messages_acknowledged_total", **CLASSIC) == 5
    assert moved("rabbitmq_queue_messages_published_total") == 6
    assert moved("rabbitmq_channel_messages_published_total") == 7
    assert moved("rabbitmq_connection_incoming_bytes_total") > 0
    assert value(after, "rabbitmq_queues") >= 1
    assert value(after, "rabbitmq_connections") >= 1 and value(after, "rabbitmq_channels") >= 1
    assert value(after, "rabbitmq_global_publishers", protocol="amqp091") >= 1
    assert value(after, "rabbitmq_build_info", rabbitmq_version="3.10.0", prometheus_plugin_version="3.10.0",
                 prometheus_client_version="none", erlang_version="none", product="headrace",
                 product_version=next(dict(k)["product_version"] for k in after["rabbitmq_build_info"])) == 1
    identity = dict(next(iter(after["rabbitmq_identity_info"])))
    assert identity["rabbitmq_node"] == "headrace@localhost"
    assert identity["rabbitmq_cluster_permanent_id"].startswith("rabbitmq-cluster-id-")


def test_a_nacked_publish_is_received_for_confirmation_and_not_confirmed(broker, ch) -> None:
    q = unique("prom-full")
    ch.queue_declare(q, arguments={"x-max-length": 1, "x-overflow": "reject-publish"})
    ch.confirm_delivery()
    before = scrape(broker)
    ch.basic_publish("", q, b"kept")
    with pytest.raises(pika.exceptions.NackError):
        ch.basic_publish("", q, b"refused")  # the queue is full: nacked
    after = scrape(broker)
    received = value(after, "rabbitmq_global_messages_received_confirm_total", protocol="amqp091")
    confirmed = value(after, "rabbitmq_global_messages_confirmed_total", protocol="amqp091")
    assert received - value(before, "rabbitmq_global_messages_received_confirm_total", protocol="amqp091") == 2
    assert confirmed - value(before, "rabbitmq_global_messages_confirmed_total", protocol="amqp091") == 1


def test_per_object_names_each_queue_and_metrics_names_none(broker, ch) -> None:
    q = unique("prom-depth")
    ch.queue_declare(q)
    for _ in range(3):
        ch.basic_publish("", q, b"xyz")
    ch.basic_get(q)  # one unacked, two ready, until the connection goes
    per_object = scrape(broker, "/metrics/per-object")
    assert value(per_object, "rabbitmq_queue_messages_ready", vhost="/", queue=q) == 2
    assert value(per_object, "rabbitmq_queue_messages_unacked", vhost="/", queue=q) == 1
    assert value(per_object, "rabbitmq_queue_messages", vhost="/", queue=q) == 3
    assert value(per_object, "rabbitmq_queue_messages_ready_bytes", vhost="/", queue=q) == 6
    assert value(per_object, "rabbitmq_queue_messages_published_total", vhost="/", queue=q) == 3
    aggregate = scrape(broker)
    assert all(not labels for labels in aggregate["rabbitmq_queue_messages_ready"])
    assert value(aggregate, "rabbitmq_queue_messages_ready") >= 2
    assert q not in httpx.get(f"http://127.0.0.1:{broker.ports['prometheus']}/metrics", timeout=10).text


def test_counters_keep_the_counts_of_deleted_queues(broker, ch) -> None:
    """A Prometheus counter that goes down reads as a restart: deleting a queue must not lower any."""
    q = unique("prom-gone")
    ch.queue_declare(q)
    for _ in range(4):
        ch.basic_publish("", q, b"m")
    for _ in range(4):
        ch.basic_get(q, auto_ack=True)
    before = scrape(broker)
    ch.queue_delete(q)
    ch.exchange_declare(unique("prom-x"), "fanout", auto_delete=False)
    after = scrape(broker)
    counters = [name for name in before if name.endswith("_total")]
    assert len(counters) > 20
    for name in counters:
        for labels, count in before[name].items():
            assert after[name][labels] >= count, (name, labels)
    assert value(after, "rabbitmq_queues_deleted_total") == value(before, "rabbitmq_queues_deleted_total") + 1


def test_the_port_takes_no_credentials_and_only_its_paths(broker, http) -> None:
    base = f"http://127.0.0.1:{broker.ports['prometheus']}"
    assert httpx.get(f"{base}/metrics", timeout=10, auth=("nobody", "wrong")).status_code == 200
    assert httpx.get(f"{base}/api/overview", auth=("guest", "guest"), timeout=10).status_code == 404
    assert httpx.post(f"{base}/metrics", timeout=10).status_code == 405
    # the management port's own /metrics stays as its ``metrics`` setting says (off by default)
    assert http.get("/metrics").status_code == 404
    listeners = http.get("/api/overview").json()["listeners"]
    assert {"protocol": "http/prometheus", "port": broker.ports["prometheus"]}.items() <= next(
        lst for lst in listeners if lst["protocol"] == "http/prometheus").items()


def test_off_by_default(broker_factory) -> None:
    plain = broker_factory()
    assert "prometheus" not in plain.ports
    with pika.BlockingConnection(pika.URLParameters(plain.url)) as conn:
        assert conn.is_open


def test_kept_alive_scrapes_do_not_hold_shutdown(broker_factory) -> None:
    """Prometheus keeps its connection open between scrapes, as browsers keep theirs to the
    management port: a stop closes such idle connections at once instead of waiting out the
    grace period (60 s here, as is the request timeout) for them."""
    proc = broker_factory(env={**BROKER_ENV, "HEADRACE_SHUTDOWN_GRACE": "60", "HEADRACE_HTTP_REQUEST_TIMEOUT": "60"})
    with httpx.Client(base_url=f"http://127.0.0.1:{proc.ports['prometheus']}", timeout=10) as scraper, \
            httpx.Client(base_url=proc.http_url, auth=("guest", "guest"), timeout=10) as api:
        assert scraper.get("/metrics").status_code == 200
        assert api.get("/api/overview").status_code == 200
        proc.signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
