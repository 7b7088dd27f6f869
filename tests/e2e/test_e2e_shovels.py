"""Dynamic shovels through the management API, against real brokers and pika: definitions are
checked, messages move (locally and between two brokers), a ``src-delete-after`` shovel deletes
itself, definitions survive a restart, and with ``on-confirm`` nothing confirmed to a publisher is
lost when either broker is killed -9 under load."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pika
import pytest
from e2e_support import unique, wait_until
from two_brokers import Publisher, api, drain, free_port, kill_each_in_turn, publish, queue_count

pytestmark = pytest.mark.timeout(120)

def put_shovel(broker: Any, name: str, value: dict[str, Any], vhost: str = "%2F") -> httpx.Response:
    return api(broker, "PUT", f"/api/parameters/shovel/{vhost}/{name}", {"value": value})


def shovel_status(broker: Any, name: str) -> dict[str, Any] | None:
    return next((s for s in api(broker, "GET", "/api/shovels").json() if s["name"] == name), None)


def bodies_of(url: str, queue: str) -> list[bytes]:
    return [body for _, body in drain(url, queue)]


def test_local_shovel_moves_messages_and_reports_status(broker):
    src, dest, name = unique("sh-src"), unique("sh-dst"), unique("shovel")
    r = put_shovel(broker, name, {"src-uri": "amqp://", "src-queue": src, "dest-uri": "amqp://", "dest-queue": dest})
    assert r.status_code == 201, r.text
    bodies = [f"m{i}".encode() for i in range(200)]
    publish(broker.url, src, bodies)
    assert wait_until(lambda: queue_count(broker, dest) == 200 and queue_count(broker, src) == 0, timeout=10)
    status = shovel_status(broker, name)
    assert status is not None and status["state"] == "running", status
    assert status["src_queue"] == src and status["dest_queue"] == dest and status["type"] == "dynamic"
    assert status["forwarded"] == 200 and status["remaining"] == "unlimited"
    assert api(broker, "GET", f"/api/shovels/vhost/%2F/{name}").json()["name"] == name
    assert [s["name"] for s in api(broker, "GET", "/api/shovels/%2F").json()].count(name) == 1
    assert sorted(bodies_of(broker.url, dest)) == sorted(bodies)
    got = api(broker, "GET", f"/api/parameters/shovel/%2F/{name}").json()
    assert got["component"] == "shovel" and got["value"]["src-queue"] == src
    assert api(broker, "DELETE", f"/api/parameters/shovel/%2F/{name}").status_code == 204
    assert wait_until(lambda: shovel_status(broker, name) is None)
    publish(broker.url, src, [b"after"])  # the deleted shovel no longer moves anything
    assert queue_count(broker, src) == 1 and queue_count(broker, dest) == 0


@pytest.mark.parametrize("value, reason", [
    ({"src-uri": "amqp://", "dest-uri": "amqp://", "dest-queue": "q"}, "exactly one of 'src-queue'"),
    ({"src-uri": "amqp://", "src-queue": "a", "src-exchange": "x", "dest-uri": "amqp://"}, "exactly one of"),
    ({"src-queue": "a", "dest-uri": "amqp://"}, "'src-uri' is required"),
    ({"src-uri": "http://h", "src-queue": "a", "dest-uri": "amqp://"}, "scheme must be amqp"),
    ({"src-uri": "amqp://", "src-queue": "a", "dest-uri": "amqp://", "ack-mode": "sometimes"}, "'ack-mode'"),
    ({"src-uri": "amqp://", "src-queue": "a", "dest-uri": "amqp://", "src-delete-after": "soon"},
     "'src-delete-after'"),
    ({"src-uri": "amqp://", "src-queue": "a", "dest-uri": "amqp://", "src-prefetch-count": -1},
     "'src-prefetch-count'"),
    ({"src-uri": "amqp://", "src-queue": "a", "dest-uri": "amqp://", "bogus-key": 1}, "unknown shovel key"),
    ({"src-uri": "amqp://", "src-queue": "a", "dest-uri": "amqp://", "dest-publish-properties": {"colour": 1}},
     "unknown property 'colour'"),
    ({"src-uri": "amqp://", "src-queue": "a", "dest-uri": "amqp://", "dest-add-forward-headers": "yes"},
     "'dest-add-forward-headers' must be true or false"),
    ("not an object", "must be an object"),
])
def test_bad_definition_is_refused_with_the_reason(broker, value, reason):
    name = unique("bad")
    r = put_shovel(broker, name, value)  # type: ignore[arg-type]
    assert r.status_code == 400 and r.json()["error"] == "bad_request" and reason in r.json()["reason"], r.text
    assert api(broker, "GET", f"/api/parameters/shovel/%2F/{name}").status_code == 404


def test_move_messages_deletes_itself_after_the_queue_length(broker):
    """The console's "Move messages": a dead-letter queue's messages back to their origin queue,
    then the shovel is gone; a message published to the source afterwards stays there."""
    dlq, origin, name = unique("dlq"), unique("origin"), unique("move")
    publish(broker.url, dlq, [f"d{i}".encode() for i in range(50)])
    r = put_shovel(broker, name, {"src-uri": "amqp://", "src-queue": dlq, "dest-uri": "amqp://",
                                  "dest-queue": origin, "src-delete-after": "queue-length", "ack-mode": "on-confirm"})
    assert r.status_code == 201, r.text
    gone = lambda: api(broker, "GET", f"/api/parameters/shovel/%2F/{name}").status_code == 404  # noqa: E731
    assert wait_until(gone, timeout=10)
    assert wait_until(lambda: shovel_status(broker, name) is None)
    assert queue_count(broker, origin) == 50 and queue_count(broker, dlq) == 0
    publish(broker.url, dlq, [b"later"])
    assert queue_count(broker, dlq) == 1


def test_delete_after_a_count_leaves_the_rest(broker):
    src, dest, name = unique("cnt-src"), unique("cnt-dst"), unique("count")
    publish(broker.url, src, [f"c{i}".encode() for i in range(30)])
    assert put_shovel(broker, name, {"src-uri": "amqp://", "src-queue": src, "dest-uri": "amqp://",
                                     "dest-queue": dest, "src-delete-after": 10}).status_code == 201
    gone = lambda: api(broker, "GET", f"/api/parameters/shovel/%2F/{name}").status_code == 404  # noqa: E731
    assert wait_until(gone, timeout=10)
    assert wait_until(lambda: queue_count(broker, src) == 20)  # the prefetched rest went back
    assert bodies_of(broker.url, dest) == [f"c{i}".encode() for i in range(10)]


def test_exchange_to_exchange_keeps_properties(broker):
    src_x, dest_x, out, name = unique("sx"), unique("dx"), unique("out"), unique("xx")
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    ch = conn.channel()
    ch.exchange_declare(src_x, "topic", durable=True)
    ch.exchange_declare(dest_x, "direct", durable=True)
    ch.queue_declare(out, durable=True)
    ch.queue_bind(out, dest_x, "to-out")
    assert put_shovel(broker, name, {"src-uri": "amqp://", "src-exchange": src_x, "src-exchange-key": "a.*",
                                     "dest-uri": "amqp://", "dest-exchange": dest_x,
                                     "dest-exchange-key": "to-out"}).status_code == 201
    assert wait_until(lambda: (shovel_status(broker, name) or {}).get("state") == "running", timeout=10)
    ch.confirm_delivery()
    ch.basic_publish(src_x, "a.b", b"yes", pika.BasicProperties(message_id="m1", headers={"h": 1}))
    ch.basic_publish(src_x, "b.b", b"no")
    assert wait_until(lambda: queue_count(broker, out) == 1, timeout=10)
    method, props, body = ch.basic_get(out, auto_ack=True)
    assert body == b"yes" and props.message_id == "m1" and props.headers == {"h": 1}
    conn.close()
    api(broker, "DELETE", f"/api/parameters/shovel/%2F/{name}")


def test_keys_that_change_messages_are_applied(broker):
    """dest-publish-properties, dest-add-forward-headers, dest-add-timestamp-header (RabbitMQ 3.10's
    headers) and src-consumer-args, on a local shovel."""
    src, dest, name = unique("kw-src"), unique("kw-dst"), unique("kw")
    before = time.time()
    assert put_shovel(broker, name, {"src-uri": "amqp://", "src-queue": src, "dest-uri": "amqp://", "dest-queue": dest,
                                     "dest-publish-properties": {"delivery_mode": 2, "app_id": "shovelled"},
                                     "dest-add-forward-headers": True, "dest-add-timestamp-header": True,
                                     "src-consumer-args": {"x-priority": 7}}).status_code == 201
    publish(broker.url, src, [b"one"], headers={"h": 1})
    assert wait_until(lambda: queue_count(broker, dest) == 1, timeout=10)
    consumers = [c for c in api(broker, "GET", "/api/consumers").json() if c["queue"]["name"] == src]
    assert consumers and consumers[0]["priority"] == 7  # src-consumer-args reached basic.consume
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    method, props, body = conn.channel().basic_get(dest, auto_ack=True)
    conn.close()
    assert body == b"one" and props.delivery_mode == 2 and props.app_id == "shovelled"
    assert props.headers["h"] == 1 and before - 1 <= props.headers["x-shovelled-timestamp"] <= time.time() + 1
    (shovelled,) = props.headers["x-shovelled"]
    assert shovelled["shovel-name"] == name and shovelled["shovel-vhost"] == "/"
    assert shovelled["shovel-type"] == "dynamic" and shovelled["src-queue"] == src and shovelled["dest-queue"] == dest
    api(broker, "DELETE", f"/api/parameters/shovel/%2F/{name}")


def test_a_shovel_imported_in_definitions_runs(broker):
    src, dest, name = unique("imp-src"), unique("imp-dst"), unique("imported")
    doc = {"parameters": [{"vhost": "/", "component": "shovel", "name": name, "value": {
        "src-uri": "amqp://", "src-queue": src, "dest-uri": "amqp://", "dest-queue": dest}}]}
    assert api(broker, "POST", "/api/definitions", doc).status_code in (200, 201, 204)
    assert wait_until(lambda: (shovel_status(broker, name) or {}).get("state") == "running", timeout=10)
    publish(broker.url, src, [b"imported"])
    assert wait_until(lambda: queue_count(broker, dest) == 1, timeout=10)
    api(broker, "DELETE", f"/api/parameters/shovel/%2F/{name}")


def test_an_unreachable_destination_is_terminated_with_the_reason(broker):
    name = unique("unreachable")
    port = free_port()  # nothing listens there
    assert put_shovel(broker, name, {"src-uri": "amqp://", "src-queue": unique("u-src"),
                                     "dest-uri": f"amqp://127.0.0.1:{port}", "dest-queue": "x",
                                     "reconnect-delay": 5}).status_code == 201
    assert wait_until(lambda: (shovel_status(broker, name) or {}).get("state") == "terminated", timeout=10)
    status = shovel_status(broker, name)
    assert status is not None and f"destination: cannot connect to 127.0.0.1:{port}" in status["reason"], status
    api(broker, "DELETE", f"/api/parameters/shovel/%2F/{name}")


def test_shovel_restarts_with_the_broker_and_is_in_the_definitions(broker_factory, tmp_path):
    b = broker_factory()
    src, dest, name = "rs-src", "rs-dst", "restarting"
    assert put_shovel(b, name, {"src-uri": "amqp://", "src-queue": src, "dest-uri": "amqp://",
                                "dest-queue": dest, "ack-mode": "on-confirm"}).status_code == 201
    params = api(b, "GET", "/api/definitions").json()["parameters"]
    assert [p for p in params if p["component"] == "shovel" and p["name"] == name]
    b.kill()
    b.start()
    assert wait_until(lambda: (shovel_status(b, name) or {}).get("state") == "running", timeout=10)
    publish(b.url, src, [b"x"])
    assert wait_until(lambda: queue_count(b, dest) == 1, timeout=10)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_on_confirm_loses_nothing_when_each_broker_is_killed(broker_pair):
    a, b = broker_pair
    assert put_shovel(a, "to-b", {
        "src-uri": "amqp://", "src-queue": "load", "dest-uri": f"amqp://guest:guest@127.0.0.1:{b.amqp_port}/%2F",
        "dest-queue": "landed", "ack-mode": "on-confirm", "src-prefetch-count": 200,
        "reconnect-delay": 0.2}).status_code == 201
    with Publisher(a, "", "load", prefix="p-", declare=True) as publisher:
        # the destination dies first: what it had not confirmed is still unacked at the source; then
        # the source: its publisher and the shovel reconnect once it is back
        kill_each_in_turn(lambda: queue_count(b, "landed"), 500, b, a)
    sent = set(publisher.confirmed)
    assert wait_until(lambda: queue_count(a, "load") == 0, timeout=60), queue_count(a, "load")
    missing = sent - {props.message_id for props, _ in drain(b.url, "landed")}
    assert not missing, f"{len(missing)} of {len(sent)} confirmed messages lost, e.g. {sorted(missing)[:5]}"
    # the waits above saw 1500 arrivals, some of them the at-least-once duplicates of a kill
    assert len(sent) > 1000
