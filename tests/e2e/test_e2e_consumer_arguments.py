"""The management API shows each consumer's basic.consume arguments, as RabbitMQ does: in
/api/consumers, a queue's consumer_details and a channel's consumer_details."""

from __future__ import annotations

from urllib.parse import quote

import httpx
import pika
import pytest
from e2e_support import unique, wait_until

pytestmark = pytest.mark.timeout(60)
AUTH = ("guest", "guest")


def test_consumer_arguments_are_reported(broker) -> None:
    queue = unique("cargs")
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    ch = conn.channel()
    ch.queue_declare(queue, exclusive=True)
    args = {"x-priority": 7, "x-note": "reports-me", "x-table": {"a": 1}}
    ch.basic_consume(queue, lambda *a: None, consumer_tag="with-args", arguments=args)
    ch.basic_consume(queue, lambda *a: None, consumer_tag="without-args")
    with httpx.Client(base_url=broker.http_url, auth=AUTH, timeout=10) as http:
        def mine() -> dict[str, dict]:
            return {c["consumer_tag"]: c for c in http.get("/api/consumers").json()
                    if c["queue"]["name"] == queue}

        assert wait_until(lambda: len(mine()) == 2, conn)
        listed = mine()
        assert listed["with-args"]["arguments"] == args
        assert listed["with-args"]["priority"] == 7
        assert listed["without-args"]["arguments"] == {}

        details = http.get(f"/api/queues/%2F/{queue}").json()["consumer_details"]
        assert {c["consumer_tag"]: c["arguments"] for c in details} == {"with-args": args, "without-args": {}}

        channel = listed["with-args"]["channel_details"]["name"]
        shown = http.get(f"/api/channels/{quote(channel, safe='')}").json()["consumer_details"]
        assert {c["consumer_tag"]: c["arguments"] for c in shown} == {"with-args": args, "without-args": {}}
    conn.close()
