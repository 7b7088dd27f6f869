"""Exchange federation between two real brokers: an upstream parameter and a policy make a local
exchange receive what the upstream's exchange of the same name routes to its binding keys, with
``x-received-from``; upstream definitions are checked; and with the default ``on-confirm`` nothing
confirmed upstream is lost when either broker is killed -9 under load."""

from __future__ import annotations

from typing import Any

import pika
import pika.exceptions
import pytest
from e2e_support import wait_until
from test_e2e_console import go, login, row, wait
from two_brokers import Publisher, api, drain, kill_each_in_turn, link_running, queue_count

pytestmark = pytest.mark.timeout(120)


def federate(down: Any, up_port: int, exchange: str) -> None:
    assert api(down, "PUT", "/api/parameters/federation-upstream/%2F/up", {"value": {
        "uri": f"amqp://guest:guest@127.0.0.1:{up_port}", "reconnect-delay": 0.2,
        "prefetch-count": 200}}).status_code == 201
    assert api(down, "PUT", "/api/policies/%2F/federate", {
        "pattern": f"^{exchange}$", "apply-to": "exchanges",
        "definition": {"federation-upstream-set": "all"}}).status_code in (201, 204)


def local_queue(broker: Any, exchange: str, queue: str, key: str) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    ch = conn.channel()
    ch.exchange_declare(exchange, "direct", durable=True)
    ch.queue_declare(queue, durable=True)
    ch.queue_bind(queue, exchange, key)
    conn.close()


def test_a_federated_exchange_gets_the_upstreams_messages_for_its_keys(broker_pair, browser):
    up, down = broker_pair
    up_port = up.amqp_port
    bad = api(down, "PUT", "/api/parameters/federation-upstream/%2F/bad", {"value": {"uri": "amqp://"}})
    assert bad.status_code == 400 and "host" in bad.json()["reason"]
    local_queue(down, "fx", "fed-q", "k")
    federate(down, up_port, "fx")
    assert wait_until(link_running(down), timeout=10), api(down, "GET", "/api/federation-links").json()
    link = api(down, "GET", "/api/federation-links/%2F").json()[0]
    assert (link["exchange"], link["upstream"], link["upstream_exchange"], link["type"]) == ("fx", "up", "fx", "exchange")
    login(browser, down.http_url)  # the console's Shovels tab lists the link
    go(browser, down.http_url, "shovels")
    wait(browser, lambda d: "running" in row(d, "federation-links", link["id"]).text)

    conn = pika.BlockingConnection(pika.URLParameters(up.url))  # the link declared fx upstream
    ch = conn.channel()
    ch.confirm_delivery()
    ch.basic_publish("fx", "k", b"for-k", pika.BasicProperties(delivery_mode=2))
    with pytest.raises(pika.exceptions.UnroutableError):  # nothing upstream is bound with this key
        ch.basic_publish("fx", "other", b"not-federated", mandatory=True)
    conn.close()
    assert wait_until(lambda: queue_count(down, "fed-q") == 1, timeout=10)
    conn = pika.BlockingConnection(pika.URLParameters(down.url))
    method, props, body = conn.channel().basic_get("fed-q", auto_ack=True)
    assert body == b"for-k"
    hops = props.headers["x-received-from"]
    assert len(hops) == 1 and hops[0]["exchange"] == "fx" and str(up_port) in hops[0]["uri"]
    conn.close()

    # a new durable binding downstream is bound upstream too
    local_queue(down, "fx", "fed-q2", "k2")
    conn = pika.BlockingConnection(pika.URLParameters(up.url))
    ch = conn.channel()
    ch.confirm_delivery()

    def routed_upstream() -> bool:
        try:
            ch.basic_publish("fx", "k2", b"for-k2", pika.BasicProperties(delivery_mode=2), mandatory=True)
            return True
        except pika.exceptions.UnroutableError:
            return False

    assert wait_until(routed_upstream, timeout=10)
    conn.close()
    assert wait_until(lambda: queue_count(down, "fed-q2") == 1, timeout=10)

    assert api(down, "DELETE", "/api/policies/%2F/federate").status_code == 204
    assert wait_until(lambda: api(down, "GET", "/api/federation-links").json() == [])


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_federation_loses_nothing_when_each_broker_is_killed(broker_pair):
    up, down = broker_pair
    local_queue(down, "fx", "fed-load", "k")
    federate(down, up.amqp_port, "fx")
    assert wait_until(link_running(down), timeout=10)
    with Publisher(up, "fx", "k", prefix="f-", mandatory=True) as publisher:
        # the downstream dies first: the upstream's federation queue keeps what comes meanwhile
        kill_each_in_turn(lambda: queue_count(down, "fed-load"), 500, down, up)
    sent = set(publisher.confirmed)
    federation_queue = [q["name"] for q in api(up, "GET", "/api/queues/%2F").json() if q["name"].startswith("federation:")]
    assert federation_queue
    assert wait_until(lambda: queue_count(up, federation_queue[0]) == 0, timeout=60)
    got = {props.message_id for props, _ in drain(down.url, "fed-load")}
    missing = sent - got
    assert not missing, f"{len(missing)} of {len(sent)} confirmed messages lost, e.g. {sorted(missing)[:5]}"
    # the waits above saw 1500 arrivals, some of them the at-least-once duplicates of a kill
    assert len(sent) > 1000
