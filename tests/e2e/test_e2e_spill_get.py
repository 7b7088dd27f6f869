"""basic.get and the HTTP get on a queue whose messages are mostly spilled to disk: a get never
answers get-empty while the queue holds messages, and the order is the publish order."""

from __future__ import annotations

import pika

from e2e_support import unique

RESIDENT = 16
BROKER_ENV = {"HEADRACE_QUEUE_MAX_RESIDENT_MESSAGES": str(RESIDENT)}


def _fill(ch, queue: str, total: int, persistent: bool = False) -> None:
    ch.queue_declare(queue, durable=persistent)
    props = pika.BasicProperties(delivery_mode=2 if persistent else 1)
    ch.confirm_delivery()
    for i in range(total):
        ch.basic_publish("", queue, b"%06d" % i, props)
    assert ch.queue_declare(queue, passive=True).method.message_count == total


def test_basic_get_returns_every_spilled_message_in_order(ch):
    queue = unique("spill-get")
    total = 40 * RESIDENT
    _fill(ch, queue, total)
    for i in range(total):
        method, _, body = ch.basic_get(queue, auto_ack=(i % 2 == 0))
        assert method is not None, f"get-empty at {i} of {total}"
        assert body == b"%06d" % i
        assert method.message_count == total - i - 1
        if i % 2:
            ch.basic_ack(method.delivery_tag)
    assert ch.basic_get(queue, auto_ack=True) == (None, None, None)
    ch.queue_delete(queue)


def test_basic_get_of_spilled_persistent_messages_in_order(ch):
    queue = unique("spill-get-p")
    total = 20 * RESIDENT
    _fill(ch, queue, total, persistent=True)
    for i in range(total):
        method, _, body = ch.basic_get(queue, auto_ack=True)
        assert method is not None, f"get-empty at {i} of {total}"
        assert body == b"%06d" % i
    assert ch.basic_get(queue, auto_ack=True) == (None, None, None)
    ch.queue_delete(queue)


def test_http_get_past_the_resident_window_returns_spilled_messages(ch, http):
    """One HTTP get of more messages than are resident: no pager runs during the request."""
    queue = unique("spill-http-get")
    total = 30 * RESIDENT
    _fill(ch, queue, total)
    got: list[dict] = []
    while len(got) < total:
        r = http.post(f"/api/queues/%2F/{queue}/get", json={"count": 10 * RESIDENT, "ackmode": "ack_requeue_false"})
        assert r.status_code == 200, r.text
        batch = r.json()
        assert len(batch) == min(10 * RESIDENT, total - len(got)), len(got)
        got += batch
    assert [m["payload"] for m in got] == ["%06d" % i for i in range(total)]
    assert http.post(f"/api/queues/%2F/{queue}/get", json={"count": 5, "ackmode": "ack_requeue_false"}).json() == []
    ch.queue_delete(queue)
