"""The firehose tracer as a RabbitMQ user turns it on: the vhost's ``tracing`` over the management
API, a queue bound to ``amq.rabbitmq.trace``, pika publishing and consuming on a real broker."""

from __future__ import annotations

import json
from typing import Any

import pika
import pytest
from e2e_support import unique, wait_until

pytestmark = pytest.mark.timeout(60)

TRACE = "amq.rabbitmq.trace"


def trace_queue(ch: Any) -> str:
    name = unique("trace")
    ch.queue_declare(name, exclusive=True)
    ch.queue_bind(name, TRACE, "#")
    return name


def take(ch: Any, queue: str, count: int) -> list[tuple[str, dict[str, Any], bytes]]:
    """``count`` trace messages: (routing key, headers, body) in order, waiting for the broker to
    publish them (it does after the batch that traced them)."""
    got: list[tuple[str, dict[str, Any], bytes]] = []

    def more() -> bool:
        method, props, body = ch.basic_get(queue, auto_ack=True)
        if method is not None:
            got.append((method.routing_key, props.headers, body))
        return len(got) >= count

    assert wait_until(more, ch.connection), got
    return got


def set_tracing(http: Any, on: Any) -> None:
    assert http.put("/api/vhosts/%2F", json={"tracing": on}).status_code == 204


def test_publishes_and_deliveries_are_copied_with_rabbitmqs_headers(broker, http, ch) -> None:
    q = unique("traced")
    ch.queue_declare(q)
    tq = trace_queue(ch)
    set_tracing(http, True)
    try:
        assert http.get("/api/vhosts/%2F").json()["tracing"] is True
        props = pika.BasicProperties(content_type="text/plain", headers={"k": "v"}, delivery_mode=2)
        ch.basic_publish("", q, b"hello", props)
        method, _, body = ch.basic_get(q)
        assert body == b"hello"
        ch.basic_reject(method.delivery_tag, requeue=True)
        method, _, _ = ch.basic_get(q, auto_ack=True)
        assert method.redelivered
        (pub_key, pub, pub_body), (del_key, first, _), (_, again, _) = take(ch, tq, 3)
    finally:
        set_tracing(http, False)
    names = {c["name"] for c in http.get("/api/connections").json()}
    assert pub["connection"] in names and pub["connection"].endswith(f" -> 127.0.0.1:{broker.amqp_port}")
    assert (pub_key, del_key, pub_body) == ("publish.", f"deliver.{q}", b"hello")
    assert pub == {"exchange_name": "", "routing_keys": [q], "routed_queues": [q],
                   "properties": {"content_type": "text/plain", "headers": {"k": "v"}, "delivery_mode": 2},
                   "node": "headrace@localhost", "vhost": "/", "connection": pub["connection"], "channel": 1,
                   "user": "guest"}
    assert first == {"exchange_name": "", "routing_keys": [q], "redelivered": 0,
                     "properties": {"content_type": "text/plain", "headers": {"k": "v"}, "delivery_mode": 2},
                     "node": "headrace@localhost", "vhost": "/", "connection": pub["connection"], "channel": 1,
                     "user": "guest"}
    assert again["redelivered"] == 1


def test_copies_are_not_traced_and_nothing_is_while_off(broker, http, ch) -> None:
    """Consuming the trace queue in a traced vhost does not feed it; tracing off copies nothing."""
    q = unique("marker")
    ch.queue_declare(q)
    tq = trace_queue(ch)
    ch.basic_publish("", q, b"before")  # tracing off: never copied
    set_tracing(http, True)
    try:
        with pytest.raises(pika.exceptions.ChannelClosedByBroker):  # refused: not a publish to trace
            refused = ch.connection.channel()
            refused.basic_publish("no-such-exchange", "k", b"lost")
            refused.queue_declare(q, passive=True)
        ch.basic_publish("amq.direct", "nowhere", b"first", mandatory=False)
        assert [(k, h["routed_queues"]) for k, h, _ in take(ch, tq, 1)] == [("publish.amq.direct", [])]
        ch.basic_publish("", q, b"marker")  # after the trace queue's own delivery above
        marker = take(ch, tq, 1)
        assert [(k, body) for k, _, body in marker] == [("publish.", b"marker")]
        assert ch.basic_get(tq, auto_ack=True)[0] is None or pytest.fail("the trace queue's delivery was traced")
    finally:
        set_tracing(http, False)


def test_http_publish_and_the_trace_exchange(broker, http, ch) -> None:
    q = unique("http-traced")
    ch.queue_declare(q)
    tq = trace_queue(ch)
    set_tracing(http, "true")  # rabbitmqadmin's form
    try:
        assert http.post("/api/exchanges/%2F/amq.default/publish",
                         json={"routing_key": q, "payload": "via http", "properties": {},
                               "payload_encoding": "string"}).json() == {"routed": True}
        [(key, headers, body)] = take(ch, tq, 1)
        with http.stream("GET", f"/api/queues/%2F/{q}/consume") as stream:  # a consume stream's delivery
            lines = (json.loads(line) for line in stream.iter_lines() if line.strip())
            next(lines)  # the consumer tag
            assert next(lines)["payload"] == "via http"
        [(streamed_key, streamed, _)] = take(ch, tq, 1)
    finally:
        set_tracing(http, "false")
    assert (key, body, headers["user"], headers["connection"], headers["channel"]) == \
        ("publish.", b"via http", "guest", "", 0)
    assert (streamed_key, streamed["user"], streamed["connection"], streamed["redelivered"]) == \
        (f"deliver.{q}", "guest", "", 0)
    assert http.get("/api/vhosts/%2F").json()["tracing"] is False
    r = http.put("/api/vhosts/%2F", json={"tracing": "maybe"})
    assert r.status_code == 400 and "tracing must be true or false" in r.json()["reason"]
    exchange = http.get(f"/api/exchanges/%2F/{TRACE}").json()
    assert (exchange["type"], exchange["internal"], exchange["durable"]) == ("topic", True, True)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
        ch.basic_publish(TRACE, "publish.x", b"forged")
        ch.queue_declare(q, passive=True)  # the refusal arrives before this answer
    assert refused.value.reply_code == 403
