"""Policies without a network (server/broker/policies.py): validation texts, matching and priority,
precedence against x-arguments and operator policies, and applying to live queues and exchanges."""

from __future__ import annotations

import pytest

from headrace.server.amqp.properties import BasicProperties, encode_properties
from headrace.server.broker import Broker
from headrace.server.broker.definitions_io import export_definitions, import_definitions
from headrace.server.broker.policies import (
    PolicyError,
    PolicyStore,
    effective_alternate,
    effective_queue_arguments,
)
from shell_ports import shell_ports

PLAIN = encode_properties(BasicProperties())
NOW = 1000.0


@pytest.fixture
def broker() -> Broker:
    b = Broker(ports=shell_ports())
    b.ensure_default("/", "guest", "guest")
    return b


def publish(vhost, queue: str, body: bytes = b"m"):
    return vhost.broker.delivery.publish(vhost, "", queue, PLAIN, body, NOW)


def body(definition, pattern="^", priority=0, apply_to="all") -> dict:
    return {"pattern": pattern, "definition": definition, "priority": priority, "apply-to": apply_to}


@pytest.mark.parametrize("definition, operator, text", [
    ({"foo": "bar"}, False, '[{<<"foo">>,<<"bar">>}] are not recognised policy settings'),
    ({"max-length": -1}, False, "-1 is not a valid maximum length"),
    ({"overflow": "sideways"}, False, '<<"sideways">> is not a valid overflow value'),
    ({"message-ttl": "10"}, False, '<<"10">> is not a valid message TTL'),
    ({}, False, "no policy provided"),
    ({"dead-letter-exchange": "dlx"}, True, '[{<<"dead-letter-exchange">>,<<"dlx">>}] are not recognised policy settings'),
])
def test_refusals_carry_rabbitmq_texts(definition, operator, text):
    with pytest.raises(PolicyError) as info:
        PolicyStore().set("/", "p", body(definition), operator=operator)
    assert str(info.value) == f"Validation failed\n\n{text}\n"


def test_bad_apply_to_and_pattern_are_refused():
    store = PolicyStore()
    with pytest.raises(PolicyError, match="is not a valid \"apply-to\" value"):
        store.set("/", "p", body({"max-length": 1}, apply_to="topics"))
    with pytest.raises(PolicyError, match="regular expression"):
        store.set("/", "p", body({"max-length": 1}, pattern="("))
    assert store.set("/", "q", body({"queue-mode": "lazy"})).definition == {"queue-mode": "lazy"}  # accepted


def test_highest_priority_matching_policy_applies():
    store = PolicyStore()
    store.set("/", "low", body({"max-length": 10}, pattern="^orders", priority=1))
    store.set("/", "high", body({"max-length": 5}, pattern="orders", priority=7))
    store.set("/", "exchanges-only", body({"alternate-exchange": "ae"}, pattern=".", priority=99,
                                           apply_to="exchanges"))
    store.set("/other", "elsewhere", body({"max-length": 1}, priority=100))
    assert store.applied("/", "queue", "eu.orders").policy.name == "high"  # unanchored search
    assert store.applied("/", "queue", "orders.eu").policy.name == "high"
    assert store.applied("/", "queue", "invoices").policy is None
    assert store.applied("/", "exchange", "orders").policy.name == "exchanges-only"


def test_apply_to_a_queue_type():
    store = PolicyStore()
    store.set("/", "streams", body({"max-age": "7D"}, apply_to="streams", priority=5))
    store.set("/", "classic", body({"max-length": 1}, apply_to="classic_queues", priority=4))
    store.set("/", "quorum", body({"delivery-limit": 3}, apply_to="quorum_queues", priority=3))
    assert store.applied("/", "queue", "q", "stream").policy.name == "streams"
    assert store.applied("/", "queue", "q").policy.name == "classic"
    assert store.applied("/", "queue", "q", "quorum").policy.name == "quorum"


def test_operator_policy_caps_and_merges_to_the_lower_value():
    store = PolicyStore()
    store.set("/", "user", body({"max-length": 100, "message-ttl": 1000, "dead-letter-exchange": "dlx"}))
    store.set("/", "cap", body({"max-length": 10, "message-ttl": 60000}), operator=True)
    applied = store.applied("/", "queue", "q")
    assert (applied.policy.name, applied.operator_policy.name) == ("user", "cap")
    assert applied.definition == {"max-length": 10, "message-ttl": 1000, "dead-letter-exchange": "dlx"}


def test_precedence_against_x_arguments():
    definition = {"max-length": 5, "message-ttl": 9000, "dead-letter-exchange": "policy-dlx", "overflow": "reject-publish",
                  "expires": 60000}
    args = {"x-max-length": 10, "x-message-ttl": 1000, "x-dead-letter-exchange": "own-dlx", "x-overflow": "drop-head"}
    out = effective_queue_arguments(args, definition)
    assert out == {"x-max-length": 5, "x-message-ttl": 1000, "x-dead-letter-exchange": "own-dlx",
                   "x-overflow": "drop-head", "x-expires": 60000}
    assert effective_queue_arguments({}, {"dead-letter-routing-key": "k"}) == {}  # no DLX: nothing to route
    assert effective_alternate({"alternate-exchange": "own"}, {"alternate-exchange": "pol"}) == "own"
    assert effective_alternate({}, {"alternate-exchange": "pol"}) == "pol"


def test_lower_max_length_drops_head_into_the_dlx_at_once(broker):
    vhost = broker.vhosts["/"]
    vhost.declare_queue("dead", now=NOW, owner=None)
    queue = vhost.declare_queue("work", now=NOW, owner=None)
    for i in range(5):
        publish(vhost, "work", b"%d" % i)
    broker.set_policy("/", "cap", body({"max-length": 2, "dead-letter-exchange": "", "dead-letter-routing-key": "dead"},
                                       pattern="^work$"), NOW)
    assert queue.messages_ready == 2 and vhost.queues["dead"].messages_ready == 3
    assert broker.delivery.get(vhost, queue, NOW, no_ack=True, owner=None).message.body == b"3"  # the head went
    broker.clear_policy("/", "cap", NOW)
    assert queue.args.max_length is None
    for i in range(5):
        publish(vhost, "work", b"x")
    assert queue.messages_ready == 6


def test_reject_publish_policy_keeps_messages_and_refuses_new_ones(broker):
    vhost = broker.vhosts["/"]
    queue = vhost.declare_queue("bounded", now=NOW, owner=None)
    for _ in range(3):
        publish(vhost, "bounded", b"m")
    broker.set_policy("/", "cap", body({"max-length": 1, "overflow": "reject-publish"}), NOW)
    assert queue.messages_ready == 3
    assert publish(vhost, "bounded", b"m").rejected


def test_new_queues_and_exchanges_take_the_policy_and_definitions_keep_it(broker):
    broker.set_policy("/", "ae", body({"alternate-exchange": "amq.fanout"}, apply_to="exchanges"), NOW)
    broker.set_policy("/", "cap", body({"max-length": 7}), NOW, operator=True)
    vhost = broker.vhosts["/"]
    exchange = vhost.declare_exchange("routed", "direct")
    assert exchange.alternate == "amq.fanout"
    assert vhost.declare_queue("capped", now=NOW, owner=None, arguments={"x-max-length": 100}).args.max_length == 7
    doc = export_definitions(broker)
    assert doc["policies"] == [{"vhost": "/", "name": "ae", "pattern": "^", "apply-to": "exchanges",
                                "definition": {"alternate-exchange": "amq.fanout"}, "priority": 0}]
    assert [p["name"] for p in doc["operator_policies"]] == ["cap"]
    fresh = Broker(ports=shell_ports())
    import_definitions(fresh, doc, NOW)
    assert fresh.policies.get("/", "cap", operator=True).definition == {"max-length": 7}
    assert fresh.vhosts["/"].declare_queue("capped2", now=NOW, owner=None).args.max_length == 7


def test_a_queue_gets_deadlines_once_a_policy_or_a_message_gives_it_a_reason(broker):
    """Without a TTL or x-expires a queue's dispatches arm no timer; a policy that adds one, or a
    message with its own expiration, does, and the deadline then fires."""
    vhost = broker.vhosts["/"]
    queue = vhost.declare_queue("plain", now=NOW, owner=None)
    publish(vhost, "plain", b"first")
    assert not queue.timed and broker.next_deadline() is None
    broker.set_policy("/", "ttl", body({"message-ttl": 2000}, pattern="^plain$"), NOW)
    publish(vhost, "plain", b"second")
    publish(vhost, "plain", b"third")
    assert queue.timed and broker.next_deadline() is None  # the head has no expiry
    assert broker.delivery.get(vhost, queue, NOW, no_ack=True, owner=None).message.body == b"first"
    assert broker.next_deadline() == NOW + 2
    broker.clear_policy("/", "ttl", NOW)
    assert queue.timed  # the messages keep their expiry
    broker.tick(NOW + 3)
    assert queue.messages_ready == 0

    other = vhost.declare_queue("per-message", now=NOW, owner=None)
    assert not other.timed
    vhost.broker.delivery.publish(vhost, "", "per-message", encode_properties(BasicProperties(expiration="500")),
                                  b"m", NOW)
    assert other.timed and broker.next_deadline() == NOW + 0.5
    broker.tick(NOW + 1)
    assert other.messages_ready == 0

    idle = vhost.declare_queue("idle", now=NOW, owner=None)
    broker.set_policy("/", "lease", body({"expires": 1000}, pattern="^idle$"), NOW)
    assert idle.timed and broker.next_deadline() == NOW + 1
    broker.tick(NOW + 2)
    assert "idle" not in vhost.queues
