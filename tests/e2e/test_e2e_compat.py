"""RabbitMQ 4.x semantics chosen by ``rabbitmq_compat``: each behaviour against a broker started
with each release it differs between, through pika."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pika
import pika.exceptions
import pytest

RELEASES = ("3.10", "4.0", "4.3")
BrokerProcess = Any  # tests/conftest.py's, reached through the module's broker


@pytest.fixture(scope="module")
def brokers(broker: BrokerProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, BrokerProcess]]:
    """The module's broker (the default: 3.10) and one started with each later release."""
    started: dict[str, BrokerProcess] = {}
    try:
        for release in RELEASES[1:]:
            data: Path = tmp_path_factory.mktemp("compat" + release.replace(".", ""))
            started[release] = type(broker)(data, env={"HEADRACE_RABBITMQ_COMPAT": release}).start()
        yield {"3.10": broker, **started}
    finally:
        for proc in started.values():
            assert proc.stop() == 0, proc.log[-4000:]


def _channel(broker: BrokerProcess) -> tuple[pika.BlockingConnection, pika.adapters.blocking_connection.BlockingChannel]:
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    return conn, conn.channel()


def _get(ch, queue: str, timeout: float = 3.0):  # type: ignore[no-untyped-def]
    """The next message of ``queue`` (basic.get polled with a deadline), or None."""
    deadline = time.monotonic() + timeout
    while True:
        method, props, body = ch.basic_get(queue)
        if method is not None:
            return method, props, body
        if time.monotonic() > deadline:
            return None
        time.sleep(0.01)


def _quorum(ch, name: str, **arguments: object) -> None:  # type: ignore[no-untyped-def]
    ch.queue_delete(name)
    ch.queue_declare(name, durable=True, arguments={"x-queue-type": "quorum", **arguments})


@pytest.mark.parametrize("release", RELEASES)
def test_quorum_delivery_limit_default(brokers: dict[str, BrokerProcess], release: str) -> None:
    """4.0: a quorum queue without x-delivery-limit drops a message after 20 returns (no DLX);
    3.10 returns it for ever."""
    conn, ch = _channel(brokers[release])
    _quorum(ch, "limit-default")
    ch.basic_publish("", "limit-default", b"m")
    deliveries = 0
    for _ in range(25):
        got = _get(ch, "limit-default", timeout=0.5 if deliveries > 20 else 3.0)
        if got is None:
            break
        deliveries += 1
        ch.basic_reject(got[0].delivery_tag, requeue=True)
    assert deliveries == (25 if release == "3.10" else 21)
    conn.close()


def test_delivery_limit_minus_one_means_none(brokers: dict[str, BrokerProcess]) -> None:
    conn, ch = _channel(brokers["4.3"])
    _quorum(ch, "limit-none", **{"x-delivery-limit": -1})
    ch.basic_publish("", "limit-none", b"m")
    for _ in range(25):
        got = _get(ch, "limit-none")
        assert got is not None
        ch.basic_reject(got[0].delivery_tag, requeue=True)
    conn.close()


def test_past_the_limit_dead_lettered(brokers: dict[str, BrokerProcess]) -> None:
    conn, ch = _channel(brokers["4.0"])
    ch.queue_declare("limit-dlq", durable=True)
    ch.queue_purge("limit-dlq")
    _quorum(ch, "limit-dlx", **{"x-delivery-limit": 1, "x-dead-letter-exchange": "",
                                "x-dead-letter-routing-key": "limit-dlq"})
    ch.basic_publish("", "limit-dlx", b"m")
    for _ in range(2):
        got = _get(ch, "limit-dlx")
        assert got is not None
        ch.basic_nack(got[0].delivery_tag, requeue=True)
    dead = _get(ch, "limit-dlq")
    assert dead is not None and dead[2] == b"m"
    assert dead[1].headers["x-death"][0]["reason"] == "delivery_limit"
    conn.close()


@pytest.mark.parametrize("release", RELEASES)
def test_nack_and_reject_counts(brokers: dict[str, BrokerProcess], release: str) -> None:
    """4.3: a nack returns without counting a failure (x-acquired-count rises, x-delivery-count
    does not) and the limit compares failures; before, every return counted."""
    conn, ch = _channel(brokers[release])
    _quorum(ch, "counts", **{"x-delivery-limit": 2})
    ch.basic_publish("", "counts", b"m")
    headers = []
    for _ in range(4):  # four nacks
        got = _get(ch, "counts", timeout=0.5 if len(headers) >= 3 else 3.0)
        if got is None:
            break
        headers.append(dict(got[1].headers or {}))
        ch.basic_nack(got[0].delivery_tag, requeue=True)
    if release != "4.3":
        assert len(headers) == 3  # the third return passed the limit of 2
        assert headers[1:] == [{"x-delivery-count": 1}, {"x-delivery-count": 2}]
        conn.close()
        return
    assert len(headers) == 4
    assert headers[1:] == [{"x-acquired-count": 1}, {"x-acquired-count": 2}, {"x-acquired-count": 3}]
    rejects = 0
    while (got := _get(ch, "counts", timeout=0.5 if rejects >= 2 else 3.0)) is not None:
        assert got[1].headers.get("x-acquired-count") == 4 + rejects
        assert got[1].headers.get("x-delivery-count", 0) == rejects
        ch.basic_reject(got[0].delivery_tag, requeue=True)
        rejects += 1
    assert rejects == 3  # the third failure passed the limit of 2
    conn.close()


def test_lost_channel_counts_a_failure(brokers: dict[str, BrokerProcess]) -> None:
    conn, ch = _channel(brokers["4.3"])
    _quorum(ch, "lost")
    ch.basic_publish("", "lost", b"m")
    other = conn.channel()
    assert _get(other, "lost") is not None
    other.close()  # unacked: back to the queue as a failed delivery
    got = _get(ch, "lost")
    assert got is not None
    assert got[1].headers == {"x-delivery-count": 1, "x-acquired-count": 1}
    conn.close()


@pytest.mark.parametrize("release", ("3.10", "4.3"))
def test_quorum_priorities(brokers: dict[str, BrokerProcess], release: str) -> None:
    """4.3: a quorum queue delivers by priority (32 levels, above 31 counts as 31); 3.10 in order."""
    conn, ch = _channel(brokers[release])
    _quorum(ch, "prio")
    for priority in (0, 5, 31, 200, 1):
        ch.basic_publish("", "prio", str(priority).encode(), pika.BasicProperties(priority=priority))
    order = []
    while (got := _get(ch, "prio", timeout=0.5 if len(order) == 5 else 3.0)) is not None:
        order.append(got[2].decode())
        ch.basic_ack(got[0].delivery_tag)
    assert order == (["0", "5", "31", "200", "1"] if release == "3.10" else ["31", "200", "5", "1", "0"])
    conn.close()


def _consume_until_cancelled(ch, queue: str, arguments: dict[str, object], limit: float) -> tuple[list[str], float]:  # type: ignore[no-untyped-def]
    """Consume without acking until the broker cancels the consumer; what arrived and when."""
    got: list[str] = []
    cancelled: list[float] = []
    ch.add_on_cancel_callback(lambda frame: cancelled.append(time.monotonic()))
    ch.basic_consume(queue, lambda c, m, p, b: got.append(b.decode()), arguments=arguments)
    start = time.monotonic()
    deadline = start + limit
    while not cancelled and time.monotonic() < deadline:
        ch.connection.process_data_events(time_limit=0.05)
    return got, (cancelled[0] - start) if cancelled else -1.0


def test_consumer_timeout_cancels_the_consumer(brokers: dict[str, BrokerProcess]) -> None:
    """4.3: the consumer's own x-consumer-timeout; on expiry basic.cancel, its message back in the
    queue, the channel still open; a consumer of the same channel without a timeout keeps its own."""
    conn, ch = _channel(brokers["4.3"])
    _quorum(ch, "ct")
    _quorum(ch, "ct-other")
    ch.basic_publish("", "ct", b"held")
    ch.basic_publish("", "ct-other", b"kept")
    kept: list[bytes] = []
    ch.basic_consume("ct-other", lambda c, m, p, b: kept.append(b))
    got, after = _consume_until_cancelled(ch, "ct", {"x-consumer-timeout": 300}, 10)
    assert got == ["held"] and kept == [b"kept"]
    assert 0.25 < after < 5, after
    assert ch.is_open
    again = _get(ch, "ct")
    assert again is not None and again[2] == b"held"
    assert again[1].headers == {"x-acquired-count": 1}  # a timeout counts no failure
    ch.basic_ack(again[0].delivery_tag)
    conn.close()


def test_consumer_timeout_from_queue_and_policy(brokers: dict[str, BrokerProcess]) -> None:
    import httpx

    broker = brokers["4.3"]
    with httpx.Client(base_url=broker.http_url, auth=("guest", "guest"), timeout=10) as http:
        r = http.put("/api/policies/%2F/ct-policy", json={"pattern": "^ct-by-policy$", "apply-to": "queues",
                                                          "definition": {"consumer-timeout": 300}})
        assert r.status_code in (201, 204), r.text
    conn, ch = _channel(broker)
    for name, arguments in (("ct-by-arg", {"x-consumer-timeout": 300}), ("ct-by-policy", {})):
        _quorum(ch, name, **arguments)
        ch.basic_publish("", name, b"m")
        got, after = _consume_until_cancelled(ch, name, {}, 10)
        assert got == ["m"] and 0.25 < after < 5, (name, after)
        assert ch.is_open
    conn.close()


def test_consumer_timeout_argument_refused(brokers: dict[str, BrokerProcess]) -> None:
    conn, ch = _channel(brokers["4.3"])
    _quorum(ch, "ct-bad")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as err:
        ch.basic_consume("ct-bad", lambda *a: None, arguments={"x-consumer-timeout": "soon"})
    assert err.value.reply_code == 406 and "x-consumer-timeout" in err.value.reply_text
    conn.close()


def test_delayed_retry_linear(brokers: dict[str, BrokerProcess]) -> None:
    """4.3: x-delayed-retry-*: a returned message is ready again after min x returns, up to max
    (500 ms, then 1000 capped to 600, then 1500 capped to 600)."""
    conn, ch = _channel(brokers["4.3"])
    _quorum(ch, "retry", **{"x-delayed-retry-type": "all", "x-delayed-retry-min": 500,
                            "x-delayed-retry-max": 600})
    ch.basic_publish("", "retry", b"m")
    got = _get(ch, "retry")
    assert got is not None
    waits = []
    for _ in range(3):
        ch.basic_nack(got[0].delivery_tag, requeue=True)
        start = time.monotonic()
        got = _get(ch, "retry", timeout=5)
        assert got is not None
        waits.append(time.monotonic() - start)
    assert waits[0] > 0.48 and waits[1] > 0.58 and 0.58 < waits[2] < 1.3, waits
    conn.close()


def test_delayed_retry_failed_only(brokers: dict[str, BrokerProcess]) -> None:
    conn, ch = _channel(brokers["4.3"])
    _quorum(ch, "retry-failed", **{"x-delayed-retry-type": "failed", "x-delayed-retry-min": 400})
    ch.basic_publish("", "retry-failed", b"m")
    got = _get(ch, "retry-failed")
    assert got is not None
    ch.basic_nack(got[0].delivery_tag, requeue=True)  # no failure: ready at once
    method, _, _ = ch.basic_get("retry-failed")
    assert method is not None
    ch.basic_reject(method.delivery_tag, requeue=True)  # a failure: it waits
    method, _, _ = ch.basic_get("retry-failed")
    assert method is None
    assert _get(ch, "retry-failed", timeout=5) is not None
    conn.close()


def test_delayed_retry_needs_min(brokers: dict[str, BrokerProcess]) -> None:
    conn, ch = _channel(brokers["4.3"])
    ch.queue_delete("retry-bad")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as err:
        ch.queue_declare("retry-bad", durable=True, arguments={"x-queue-type": "quorum",
                                                                "x-delayed-retry-type": "all"})
    assert err.value.reply_code == 406 and "x-delayed-retry-min" in err.value.reply_text
    conn.close()


@pytest.mark.parametrize("release", ("3.10", "4.0"))
def test_max_message_size_default(brokers: dict[str, BrokerProcess], release: str) -> None:
    """4.0 lowered the default largest message from 128 MiB to 16 MiB."""
    conn, ch = _channel(brokers[release])
    ch.queue_declare("big", durable=False, exclusive=True)
    body = b"x" * (16 * 1024 * 1024 + 1)
    if release == "3.10":
        ch.basic_publish("", "big", body)
        got = _get(ch, "big", timeout=10)
        assert got is not None and len(got[2]) == len(body)
    else:
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as err:
            ch.basic_publish("", "big", body)
            _get(ch, "big", timeout=10)
        assert err.value.reply_code == 406
    conn.close()


def test_deprecated_features_used(brokers: dict[str, BrokerProcess]) -> None:
    """What clients use is reported once they use it: global QoS, a transient non-exclusive
    queue, a policy with classic mirroring keys (which 3.10 accepts and 4.x refuses)."""
    import httpx

    with httpx.Client(base_url=brokers["4.0"].http_url, auth=("guest", "guest"), timeout=10) as http:
        r = http.put("/api/policies/%2F/mirrored", json={"pattern": "^nothing$", "definition": {"ha-mode": "all"}})
        assert r.status_code == 400 and "not recognised policy settings" in r.json()["reason"]
    broker = brokers["3.10"]
    with httpx.Client(base_url=broker.http_url, auth=("guest", "guest"), timeout=10) as http:
        listed = http.get("/api/deprecated-features").json()
        assert {f["name"] for f in listed} >= {"global_qos", "transient_nonexcl_queues", "classic_queue_mirroring"}
        assert set(listed[0]) == {"name", "desc", "deprecation_phase", "doc_url", "provided_by"}
        before = {f["name"] for f in http.get("/api/deprecated-features/used").json()}
        assert not before & {"global_qos", "transient_nonexcl_queues", "classic_queue_mirroring"}
        conn, ch = _channel(broker)
        ch.basic_qos(prefetch_count=10, global_qos=True)
        ch.queue_declare("transient-shared", durable=False)
        r = http.put("/api/policies/%2F/mirrored", json={"pattern": "^nothing$", "definition": {"ha-mode": "all"}})
        assert r.status_code in (201, 204), r.text
        used = {f["name"] for f in http.get("/api/deprecated-features/used").json()}
        assert used >= {"global_qos", "transient_nonexcl_queues", "classic_queue_mirroring"}
        ch.queue_delete("transient-shared")
        http.delete("/api/policies/%2F/mirrored")
        used = {f["name"] for f in http.get("/api/deprecated-features/used").json()}
        assert "transient_nonexcl_queues" not in used and "classic_queue_mirroring" not in used
        assert "global_qos" in used  # used since the start
        conn.close()
        assert http.get("/api/deprecated-features", auth=("nobody", "x")).status_code == 401


def test_health_checks_of_4x(brokers: dict[str, BrokerProcess]) -> None:
    import httpx

    broker = brokers["4.3"]
    with httpx.Client(base_url=broker.http_url, auth=("guest", "guest"), timeout=10) as http:
        for path in ("is-in-service", "below-node-connection-limit", "ready-to-serve-clients",
                     "metadata-store/initialized", "metadata-store/initialized/with-data",
                     "quorum-queues-without-elected-leaders/all-vhosts/.*",
                     "quorum-queues-without-elected-leaders/vhost/%2F/.*"):
            r = http.get(f"/api/health/checks/{path}")
            assert r.status_code == 200 and r.json()["status"] == "ok", (path, r.text)
        r = http.get("/api/health/checks/quorum-queues-without-elected-leaders/all-vhosts/(")
        assert r.status_code == 400
        r = http.get("/api/health/checks/quorum-queues-without-elected-leaders/vhost/nope/.*")
        assert r.status_code == 404


def test_diagnostics_cli(brokers: dict[str, BrokerProcess]) -> None:
    """``headrace diagnostics``: each check exits 0 when it passes and 1 with the reason when it
    fails (the connection limit, reached by one open connection)."""
    import json

    from click.testing import CliRunner

    from headrace.cli.main import cli

    def run(broker: BrokerProcess, *args: str) -> Any:
        return CliRunner().invoke(cli, ["diagnostics", *args, "--url", broker.http_url], catch_exceptions=False)

    broker = brokers["4.3"]
    for check in ("check-local-alarms", "check-is-in-service", "check-below-connection-limit",
                  "check-ready-to-serve-clients", "check-metadata-store-initialized", "check-virtual-hosts",
                  "check-if-node-is-quorum-critical"):
        r = run(broker, check)
        assert r.exit_code == 0 and f"{check}: ok" in r.output, (check, r.output)
    r = run(broker, "check-quorum-queues-without-leader", "^orders", "--across-all-vhosts", "--json")
    assert r.exit_code == 0 and json.loads(r.output)["status"] == "ok"
    r = run(broker, "list-deprecated-features", "--json")
    assert "global_qos" in {row["name"] for row in json.loads(r.output)}
    limited = type(broker)(broker.data_dir.parent / "limited", env={"HEADRACE_MAX_CONNECTIONS": "1"})
    limited.data_dir.mkdir()
    limited.start()
    try:
        conn = pika.BlockingConnection(pika.URLParameters(limited.url))
        r = run(limited, "check-below-connection-limit")
        assert r.exit_code == 1 and "maximum number of connections (1)" in r.output, r.output
        r = run(limited, "check-ready-to-serve-clients")
        assert r.exit_code == 1
        conn.close()
    finally:
        assert limited.stop() == 0


def test_purge_takes_messages_waiting_for_retry(brokers: dict[str, BrokerProcess]) -> None:
    conn, ch = _channel(brokers["4.3"])
    _quorum(ch, "retry-purge", **{"x-delayed-retry-type": "all", "x-delayed-retry-min": 300})
    ch.basic_publish("", "retry-purge", b"m")
    got = _get(ch, "retry-purge")
    assert got is not None
    ch.basic_nack(got[0].delivery_tag, requeue=True)
    assert ch.queue_purge("retry-purge").method.message_count == 1
    assert _get(ch, "retry-purge", timeout=0.8) is None
    conn.close()
