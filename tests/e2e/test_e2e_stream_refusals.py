"""What a stream queue refuses, with RabbitMQ's answers: queue.purge (a log is truncated by its
retention only) over AMQP and HTTP, basic.get over HTTP, and the HTTP streaming consume (a stream is
read by cursor)."""

from __future__ import annotations

import pika
import pika.exceptions
import pytest
from e2e_support import unique

pytestmark = pytest.mark.timeout(60)


def _stream_with_messages(ch, count: int) -> str:
    name = unique("stream-refuse")
    ch.queue_declare(name, durable=True, arguments={"x-queue-type": "stream"})
    ch.confirm_delivery()
    for i in range(count):
        ch.basic_publish("", name, b"%d" % i)
    return name


def test_amqp_purge_of_a_stream_is_not_implemented_and_keeps_the_log(broker, conn, ch):
    name = _stream_with_messages(ch, 5)
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as info:
        ch.queue_purge(name)
    assert info.value.reply_code == 540
    assert info.value.reply_text == (
        f"NOT_IMPLEMENTED - queue.purge not supported by stream queues queue '{name}' in vhost '/'")
    again = pika.BlockingConnection(pika.URLParameters(broker.url))
    try:
        assert again.channel().queue_declare(name, passive=True).method.message_count == 5
    finally:
        again.close()


def test_http_purge_of_a_stream_is_refused_with_json(ch, http):
    name = _stream_with_messages(ch, 3)
    r = http.delete(f"/api/queues/%2F/{name}/contents")
    assert r.status_code == 400, r.text
    assert r.json()["error"] == "bad_request"
    assert r.json()["reason"] == f"queue.purge not supported by stream queues queue '{name}' in vhost '/'"
    assert ch.queue_declare(name, passive=True).method.message_count == 3


def test_http_streaming_consume_of_a_stream_is_refused_with_json(ch, http):
    name = _stream_with_messages(ch, 2)
    r = http.get(f"/api/queues/%2F/{name}/consume", params={"prefetch": "5"})
    assert r.status_code == 400, r.text
    assert r.headers["content-type"].startswith("application/json")
    assert r.json()["error"] == "bad_request"
    assert f"stream queue '{name}'" in r.json()["reason"]
    assert all(c["queue"]["name"] != name for c in http.get("/api/consumers").json())
    assert ch.queue_declare(name, passive=True).method.message_count == 2


def test_http_get_from_a_stream_is_a_bad_request_as_in_rabbitmq(ch, http):
    """AMQP's 540 NOT_IMPLEMENTED inside an HTTP handler: RabbitMQ 3.10 answers 400 bad_request
    (never 501), and the label always says what the status says."""
    name = _stream_with_messages(ch, 1)
    r = http.post(f"/api/queues/%2F/{name}/get", json={"count": 1, "ackmode": "ack_requeue_true", "encoding": "auto"})
    assert r.status_code == 400, r.text
    assert r.json()["error"] == "bad_request"
    assert "basic.get not supported by stream queues" in r.json()["reason"]
    refused = http.put("/api/queues/%2F/amq.reserved", json={"durable": True})  # AMQP 403 ACCESS_REFUSED
    assert (refused.status_code, refused.json()["error"]) == (401, "not_authorised")
    missing = http.post(f"/api/queues/%2F/{unique('none')}/get", json={"count": 1, "ackmode": "ack_requeue_true",
                                                                     "encoding": "auto"})
    assert (missing.status_code, missing.json()["error"]) == (404, "not_found")
    assert ch.queue_declare(name, passive=True).method.message_count == 1
