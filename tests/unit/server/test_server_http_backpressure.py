"""HTTP publishes are refused with 503 + Retry-After where AMQP would stop reading a publisher: here,
while the message store's outbox is at its bound, until the flusher takes a batch."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from headrace.server.http import messages
from headrace.server.http.routes import HTTPError, Request
from session_support import durable_broker


def publish(ctx: SimpleNamespace, n: int) -> None:
    line = json.dumps({"routing_key": "d", "payload": "x", "properties": {"delivery_mode": 2}})
    req = Request("POST", "/api/exchanges/%2F/amq.default/publish-batch", {}, {},
                  "\n".join([line] * n).encode(), user=ctx.broker.users.users["guest"])
    messages.publish_batch(ctx, req, ctx.broker.vhost("/"), "amq.default")


def test_http_publish_is_503_while_the_store_is_behind_and_accepted_after_a_flush():
    broker = durable_broker(3)
    ctx = SimpleNamespace(broker=broker, now=1000.0)
    publish(ctx, 3)
    assert broker.store_backlog == 3
    with pytest.raises(HTTPError) as info:
        publish(ctx, 1)
    assert info.value.status == 503 and ("retry-after", "1") in info.value.headers
    assert "message store is behind" in info.value.reason
    ops, ticket = broker.take_store_ops(3)
    broker.store_synced(ticket)
    publish(ctx, 1)
    assert broker.store_backlog == 1
