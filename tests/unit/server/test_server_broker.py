"""Broker and VHost without a network: declare rules, publish path, dead letters, definitions."""

from __future__ import annotations

import pytest

from headrace.exchanges import DestinationKind
from headrace.server.amqp.errors import ChannelException, ConnectionException
from headrace.server.amqp.properties import BasicProperties, decode_properties, encode_properties
from headrace.server.broker import Broker, Settle
from headrace.server.broker.definitions_io import export_definitions, import_definitions
from shell_ports import shell_ports

NOW = 1000.0  # the broker time the calls below pass

QUEUE = DestinationKind.QUEUE


@pytest.fixture
def broker() -> Broker:
    b = Broker(ports=shell_ports(), store_enabled=True)
    b.ensure_default("/", "guest", "guest")
    return b


def props(**kw) -> bytes:
    return encode_properties(BasicProperties(**kw))


def test_predeclared_exchanges_exist(broker):
    vhost = broker.vhosts["/"]
    assert {"", "amq.direct", "amq.fanout", "amq.topic", "amq.headers", "amq.match"} <= set(vhost.exchanges)


@pytest.mark.parametrize(
    ("call", "code"),
    [
        (lambda v: v.declare_exchange("nope", "direct", passive=True), 404),
        (lambda v: v.declare_exchange("amq.custom", "direct"), 403),
        (lambda v: v.declare_queue("missing", now=NOW, owner=None, passive=True), 404),
        (lambda v: v.declare_queue("amq.q", now=NOW, owner=None), 403),
        (lambda v: v.bind("", "q", QUEUE, "k", None), 403),
        (lambda v: v.bind("amq.direct", "missing", QUEUE, "k", None), 404),
        (lambda v: v.broker.delivery.publish(v, "missing", "k", b"", b"", NOW), 404),
    ],
)
def test_declare_and_bind_errors_carry_rabbitmq_codes(broker, call, code):
    with pytest.raises(ChannelException) as info:
        call(broker.vhosts["/"])
    assert info.value.reply_code == code


def test_unknown_exchange_type_is_a_connection_error(broker):
    with pytest.raises(ConnectionException) as info:
        broker.vhosts["/"].declare_exchange("x", "nonsense")
    assert info.value.reply_code == 503


def test_inequivalent_queue_redeclare(broker):
    vhost = broker.vhosts["/"]
    vhost.declare_queue("q", now=NOW, owner=None, durable=True)
    with pytest.raises(ChannelException) as info:
        vhost.declare_queue("q", now=NOW, owner=None, durable=False)
    assert info.value.reply_code == 406
    assert "inequivalent arg 'durable'" in info.value.reply_text


def test_exclusive_queue_locked_for_other_owner(broker):
    vhost = broker.vhosts["/"]
    owner = object()
    vhost.declare_queue("ex", now=NOW, owner=owner, exclusive=True)
    with pytest.raises(ChannelException) as info:
        vhost.declare_queue("ex", now=NOW, owner=object(), exclusive=True)
    assert info.value.reply_code == 405


def test_owned_queues_are_the_owners_exclusive_queues_still_there(broker):
    """A closing connection's exclusive queues, in the order declared; a queue deleted meanwhile
    (by its owner, or expired) is no longer among them, nor another owner's or a shared queue."""
    vhost = broker.vhosts["/"]
    owner, other = object(), object()
    for name in ("a", "b", "c"):
        vhost.declare_queue(name, now=NOW, owner=owner, exclusive=True)
    vhost.declare_queue("a", now=NOW, owner=owner, exclusive=True)  # a redeclare: still one
    vhost.declare_queue("theirs", now=NOW, owner=other, exclusive=True)
    vhost.declare_queue("shared", now=NOW, owner=owner)
    assert vhost.owned_queues(owner) == ["a", "b", "c"]
    vhost.delete_queue("b", owner=owner)
    assert vhost.owned_queues(owner) == ["a", "c"] and vhost.owned_queues(other) == ["theirs"]
    for name in vhost.owned_queues(owner):
        vhost.delete_queue(name)
    assert vhost.owned_queues(owner) == [] and set(vhost.queues) == {"theirs", "shared"}
    vhost.declare_queue("a", now=NOW, owner=other, exclusive=True)  # the name is free again
    assert vhost.owned_queues(other) == ["theirs", "a"]


def test_publish_routes_one_message_object_to_every_queue(broker):
    vhost = broker.vhosts["/"]
    for name in ("a", "b"):
        vhost.declare_queue(name, now=NOW, owner=None)
        vhost.bind("amq.fanout", name, QUEUE, "", None)
    result = vhost.broker.delivery.publish(vhost, "amq.fanout", "k", props(), b"body", NOW)
    assert result.routed
    a = vhost.queues["a"].get(NOW, no_ack=True, owner=None)
    b = vhost.queues["b"].get(NOW, no_ack=True, owner=None)
    assert a.message is b.message


def test_persistent_publish_to_durable_queue_makes_one_store_op(broker):
    vhost = broker.vhosts["/"]
    vhost.declare_queue("d1", now=NOW, owner=None, durable=True)
    vhost.declare_queue("d2", now=NOW, owner=None, durable=True)
    vhost.declare_queue("t", now=NOW, owner=None, durable=False)
    for q in ("d1", "d2", "t"):
        vhost.bind("amq.fanout", q, QUEUE, "", None)
    result = vhost.broker.delivery.publish(vhost, "amq.fanout", "", props(delivery_mode=2), b"p", NOW)
    ops, ticket = broker.take_store_ops()
    assert len(ops) == 1 and set(ops[0].queues) == {"d1", "d2"}
    assert result.ticket == ticket == 1
    transient = vhost.broker.delivery.publish(vhost, "amq.fanout", "", props(delivery_mode=1), b"t", NOW)
    assert transient.ticket == 0 and broker.take_store_ops()[0] == []


def test_bcc_is_routed_but_stripped(broker):
    vhost = broker.vhosts["/"]
    for name in ("to", "hidden"):
        vhost.declare_queue(name, now=NOW, owner=None)
    vhost.broker.delivery.publish(vhost, "", "to", props(headers={"BCC": ["hidden"], "x": 1}), b"m", NOW)
    entry = vhost.queues["hidden"].get(NOW, no_ack=True, owner=None)
    assert decode_properties(entry.message.props_raw).headers == {"x": 1}


def test_rejected_message_is_dead_lettered_with_x_death(broker):
    vhost = broker.vhosts["/"]
    vhost.declare_exchange("dlx", "fanout")
    vhost.declare_queue("dead", now=NOW, owner=None)
    vhost.bind("dlx", "dead", QUEUE, "", None)
    vhost.declare_queue("work", now=NOW, owner=None, arguments={"x-dead-letter-exchange": "dlx"})
    vhost.broker.delivery.publish(vhost, "", "work", props(), b"bad", NOW)
    queue = vhost.queues["work"]
    entry = queue.get(NOW, no_ack=False, owner="getter")
    broker.delivery.settle(vhost, [(queue, entry)], Settle.REJECT, NOW)
    dead = vhost.queues["dead"].get(NOW, no_ack=True, owner=None)
    death = decode_properties(dead.message.props_raw).headers["x-death"][0]
    assert death["reason"] == "rejected" and death["queue"] == "work" and death["count"] == 1


def test_queue_delete_cascades_bindings_and_auto_delete_exchange(broker):
    vhost = broker.vhosts["/"]
    vhost.declare_exchange("ad", "direct", auto_delete=True)
    vhost.declare_queue("q", now=NOW, owner=None)
    vhost.bind("ad", "q", QUEUE, "k", None)
    vhost.delete_queue("q")
    assert "ad" not in vhost.exchanges


def test_definitions_round_trip_keeps_only_durable(broker):
    vhost = broker.vhosts["/"]
    vhost.declare_exchange("dx", "topic", durable=True)
    vhost.declare_exchange("tx", "topic", durable=False)
    vhost.declare_queue("dq", now=NOW, owner=None, durable=True, arguments={"x-max-length": 5})
    vhost.declare_queue("tq", now=NOW, owner=None, durable=False)
    vhost.bind("dx", "dq", QUEUE, "a.#", None)
    doc = export_definitions(broker)
    assert [e["name"] for e in doc["exchanges"]] == ["dx"]
    assert [q["name"] for q in doc["queues"]] == ["dq"]
    fresh = Broker(ports=shell_ports())
    import_definitions(fresh, doc, NOW)
    v2 = fresh.vhosts["/"]
    assert "dx" in v2.exchanges and "dq" in v2.queues and "tq" not in v2.queues
    assert v2.queues["dq"].arguments == {"x-max-length": 5}
    assert fresh.users.authenticate("guest", "guest") is not None
    assert [b.routing_key for b in v2.exchanges["dx"].bindings()] == ["a.#"]


def test_alarm_notifies_observers(broker):
    seen = []

    class Observer:
        def store_synced(self, ticket):
            pass

        def alarms_changed(self, alarms):
            seen.append(alarms)

    broker.observers.add(Observer())
    broker.set_alarm("memory", True)
    broker.set_alarm("memory", True)
    broker.set_alarm("memory", False)
    assert seen == [frozenset({"memory"}), frozenset()]


def test_a_sync_tells_only_the_observers_waiting_for_it_and_each_once(broker):
    told = []

    class Observer:
        def __init__(self, name, again=False):
            self.name, self.again = name, again

        def store_synced(self, ticket):
            told.append((self.name, ticket))
            if self.again:  # still waits for a later ticket: asks again
                self.again = False
                broker.wait_for_sync(self)

        def alarms_changed(self, alarms):
            pass

    idle, waiting, twice = Observer("idle"), Observer("waiting"), Observer("twice", again=True)
    broker.observers.update({idle, waiting, twice})
    broker.wait_for_sync(waiting)
    broker.wait_for_sync(waiting)  # asking twice is still one call
    broker.wait_for_sync(twice)
    broker.store_synced(1)
    assert sorted(told) == [("twice", 1), ("waiting", 1)]
    broker.store_synced(2)
    assert sorted(told) == [("twice", 1), ("twice", 2), ("waiting", 1)]
    broker.store_synced(3)
    assert len(told) == 3
