"""The shovel definition as RabbitMQ's ``shovel`` parameter, one link's ledger of what waits for the
destination's confirms, and which federation links a broker's upstreams, policies and bindings
call for."""

from __future__ import annotations

import pytest

from headrace.exchanges.base import QUEUE
from headrace.server.amqp.properties import BasicProperties, decode_properties, encode_properties
from headrace.server.broker import Broker
from headrace.server.broker.federation import LinkKey, federation_links, parse_upstream, queue_wants
from headrace.server.broker.shovels import FederationHop, Ledger, parse_shovel, parse_uri, redact
from headrace.server.net.shovel_link import received_from
from shell_ports import shell_ports


def test_defaults_and_legacy_keys():
    spec = parse_shovel({"src-uri": "amqp://", "src-queue": "a", "dest-uri": ["amqp://h1", "amqp://h2"],
                         "prefetch-count": 50, "delete-after": "queue-length"})
    assert spec.ack_mode == "on-confirm" and spec.prefetch_count == 50 and spec.delete_after == "queue-length"
    assert spec.dest_uris == ("amqp://h1", "amqp://h2") and spec.src_exchange_key == "#"
    assert parse_shovel({"src-uri": "amqp://", "src-exchange": "x", "dest-uri": "amqp://",
                         "src-prefetch-count": 7, "prefetch-count": 9}).prefetch_count == 7


def test_uris():
    local = parse_uri("amqp://", "v1")
    assert local.host is None and local.vhost == "v1" and local.user is None
    remote = parse_uri("amqps://u%40x:p%2Fw@broker:5000/%2Fprod", "v1")
    assert (remote.host, remote.port, remote.user, remote.password, remote.vhost, remote.tls) == (
        "broker", 5000, "u@x", "p/w", "/prod", True)
    assert parse_uri("amqp://h", "v").vhost == "/" and parse_uri("amqp://h", "v").port == 5672
    assert redact("amqp://u:secret@h:1/v") == "amqp://u@h:1/v"
    with pytest.raises(ValueError, match="bad port"):
        parse_uri("amqp://h:notaport/", "/")


@pytest.mark.parametrize("value", [
    {"src-uri": "amqp://", "src-exchange": "x", "dest-uri": "amqp://", "src-delete-after": "queue-length"},
    {"src-uri": "amqp://", "src-queue": "a", "dest-uri": "amqp://", "dest-queue": "b", "dest-exchange": "x"},
    {"src-uri": "amqp://", "src-queue": "a", "dest-uri": "amqp://", "src-protocol": "amqp10"},
    {"src-uri": "amqp://", "src-queue": "a", "dest-uri": "amqp://", "reconnect-delay": True},
    {"src-uri": [], "src-queue": "a", "dest-uri": "amqp://"},
])
def test_refusals(value):
    with pytest.raises(ValueError):
        parse_shovel(value)


def test_on_confirm_acks_only_what_the_destination_confirmed():
    ledger = Ledger("on-confirm", None)
    assert [ledger.published(tag) for tag in (11, 12, 13, 14)] == [[], [], [], []]
    assert ledger.confirmed(2, False, True) == ([12], None)  # one, out of order
    assert ledger.confirmed(3, True, True) == ([], 13)  # 11 and 13: the oldest waiting, at once
    assert ledger.confirmed(3, True, True) == ([], None)  # nothing left below 3
    assert ledger.confirmed(4, False, False) == ([14], None)  # refused: back to the source
    assert ledger.acked == 3 and ledger.forwarded == 3 and not ledger.waiting


def test_count_ends_when_settled():
    ledger = Ledger("on-confirm", 2)
    ledger.published(1)
    ledger.published(2)
    assert not ledger.wants() and not ledger.done()
    ledger.confirmed(2, True, True)
    assert ledger.done()
    assert Ledger("on-publish", 1).published(5) == [(5, False)]
    assert Ledger("no-ack", 0).done()


# ---------------------------------------------------------------------- federation
UP = {"uri": "amqp://u:p@upstream-host", "max-hops": 2}


def federated_broker() -> Broker:
    broker = Broker(ports=shell_ports())
    broker.ensure_default("/", "guest", "guest")
    vhost = broker.vhosts["/"]
    vhost.declare_exchange("events", "topic", durable=True)
    vhost.declare_exchange("plain", "fanout", durable=True)
    vhost.declare_queue("q", owner=None, now=0.0, durable=True)
    vhost.bind("events", "q", QUEUE, "a.*", None)
    vhost.bind("events", "q", QUEUE, "b.#", None)
    return broker


def test_links_follow_upstreams_policies_and_bindings():
    broker = federated_broker()
    assert federation_links(broker) == {}  # no upstream yet
    broker.parameters.set_parameter("federation-upstream", "/", "up", UP)
    assert federation_links(broker) == {}  # no policy yet
    broker.set_policy("/", "fed", {"pattern": "^events$", "apply-to": "exchanges",
                                   "definition": {"federation-upstream-set": "all"}}, 0.0)
    links = federation_links(broker)
    spec = links[LinkKey("/", "events", "up")]
    assert list(links) == [LinkKey("/", "events", "up")]
    assert spec.src_uris == ("amqp://u:p@upstream-host",) and spec.dest_exchange == "events"
    assert spec.federation is not None and spec.federation.max_hops == 2
    assert spec.federation.queue == "federation: events -> headrace@localhost"
    assert [key for key, _ in spec.federation.bindings] == ["a.*", "b.#"]
    broker.set_policy("/", "fed", {"pattern": "^(events|plain)$", "apply-to": "exchanges",
                                   "definition": {"federation-upstream": "up"}}, 0.0)
    plain = federation_links(broker)[LinkKey("/", "plain", "up")]
    assert plain.federation is not None and plain.federation.bindings == (("", ()),)
    broker.parameters.set_parameter("federation-upstream", "/", "up", {"uri": 7})  # invalid: no link
    assert federation_links(broker) == {}


def test_a_queue_policy_federates_queues_on_demand():
    broker = federated_broker()
    broker.parameters.set_parameter("federation-upstream", "/", "up", {**UP, "queue": "remote-q"})
    broker.set_policy("/", "fedq", {"pattern": "^q$", "apply-to": "queues",
                                    "definition": {"federation-upstream": "up"}}, 0.0)
    links = federation_links(broker)
    assert list(links) == [LinkKey("/", "q", "up", "queue")]
    spec = links[LinkKey("/", "q", "up", "queue")]
    assert spec.on_demand and spec.src_queue == "remote-q" and spec.dest_queue == "q" and spec.federation is None
    assert not queue_wants(broker, "/", "q")  # no consumer
    assert not queue_wants(broker, "/", "missing")


def test_upstream_refusals():
    for value in ({"uri": "amqp://"}, {"uri": "amqp://h", "max-hops": 0}, {"uri": "amqp://h", "what": 1}, []):
        with pytest.raises(ValueError):
            parse_upstream(value)


def test_received_from_counts_hops():
    hop = FederationHop("q", (), 2, "up", "events", "topic")
    once = received_from(hop, encode_properties(BasicProperties(headers={"h": 1})), "amqp://u@h:5672/%2F")
    assert once is not None
    headers = decode_properties(once).headers or {}
    assert headers["h"] == 1 and [e["exchange"] for e in headers["x-received-from"]] == ["events"]
    twice = received_from(hop, once, "amqp://u@h2:5672/%2F")
    assert twice is not None and len((decode_properties(twice).headers or {})["x-received-from"]) == 2
    assert received_from(hop, twice, "amqp://u@h3:5672/%2F") is None  # made its two hops


def test_publish_properties_and_forward_headers_rewrite_what_is_forwarded():
    spec = parse_shovel({"src-uri": "amqp://", "src-queue": "a", "dest-uri": "amqp://u:pw@h", "dest-queue": "b",
                         "dest-publish-properties": {"delivery_mode": 2, "app_id": "sh"},
                         "dest-add-forward-headers": True, "dest-add-timestamp-header": True,
                         "src-consumer-args": {"x-priority": 5}}, "sh1", "v")
    assert spec.rewrites and spec.consumer_args == {"x-priority": 5}
    raw = encode_properties(BasicProperties(delivery_mode=1, headers={"x-shovelled": [{"shovel-name": "earlier"}]}))
    props = decode_properties(spec_rewrite(spec, raw))
    assert props.delivery_mode == 2 and props.app_id == "sh"
    assert props.headers is not None and props.headers["x-shovelled-timestamp"] == 1_700_000_000
    first, earlier = props.headers["x-shovelled"]
    assert earlier == {"shovel-name": "earlier"}  # prepended, the latest first
    assert first["shovel-name"] == "sh1" and first["shovel-vhost"] == "v" and first["shovel-type"] == "dynamic"
    assert first["src-queue"] == "a" and first["dest-queue"] == "b" and first["dest-uri"] == "amqp://u@h"
    assert not parse_shovel({"src-uri": "amqp://", "src-queue": "a", "dest-uri": "amqp://"}).rewrites


def spec_rewrite(spec, raw: bytes) -> bytes:
    from headrace.server.broker.shovels import rewrite_properties
    return rewrite_properties(spec, raw, "amqp://local", "amqp://u:pw@h", 1_700_000_000.5)


@pytest.mark.parametrize("value, reason", [
    ({"dest-publish-properties": {"colour": "red"}}, "unknown property 'colour'"),
    ({"dest-publish-properties": {"delivery_mode": 3}}, "'delivery_mode' must be 1 or 2"),
    ({"dest-publish-properties": {"priority": "high"}}, "'priority' must be an integer"),
    ({"dest-publish-properties": "x"}, "'dest-publish-properties' must be an object"),
    ({"dest-add-forward-headers": "yes"}, "'dest-add-forward-headers' must be true or false"),
    ({"dest-add-timestamp-header": 1}, "'dest-add-timestamp-header' must be true or false"),
    ({"src-consumer-args": []}, "'src-consumer-args' must be an object"),
])
def test_the_keys_that_change_messages_are_checked(value, reason):
    with pytest.raises(ValueError, match=reason):
        parse_shovel({"src-uri": "amqp://", "src-queue": "a", "dest-uri": "amqp://", **value})
