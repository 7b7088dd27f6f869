"""Publish deduplication: the windows alone (bounds, expiry, keys), then through the publish path
of a broker without a network."""

from __future__ import annotations

import pytest

from headrace.exchanges import DestinationKind
from headrace.server.amqp.properties import BasicProperties, encode_properties
from headrace.server.broker import Broker
from headrace.server.broker.dedup import Dedup, Window, window_id
from shell_ports import shell_ports

QUEUE = DestinationKind.QUEUE


def props(**kw) -> bytes:
    return encode_properties(BasicProperties(**kw))


def test_window_is_bounded_by_count_oldest_out_first():
    w = Window(size=3)
    for key in "abcd":
        w.add(key, 0.0)
    assert list(w.entries) == ["b", "c", "d"]
    assert not w.seen("a", 0.0) and w.seen("b", 0.0)
    w.add("b", 0.0)  # seen again: now the newest
    w.add("e", 0.0)
    assert list(w.entries) == ["d", "b", "e"]


def test_window_is_bounded_by_time_and_per_message_ttl():
    w = Window(size=10, ttl_ms=1000)
    w.add("a", 100.0)
    w.add("b", 100.0, ttl_ms=5000)
    assert w.seen("a", 100.999) and not w.seen("a", 101.0)
    assert "a" not in w.entries and w.seen("b", 104.9)
    w.load([("old", 99.0), ("live", 200.0), ("forever", None)], now=150.0)
    assert "old" not in w.entries and w.seen("live", 150.0) and w.seen("forever", 1e12)


def test_key_is_the_named_header_or_else_the_message_id():
    w = Window.from_arguments({"x-message-deduplication": True, "x-deduplication-header": "id"})
    assert w is not None and w.size == 128 and w.ttl_ms is None
    assert w.key_of({"id": b"k1"}, props(headers={"id": b"k1"})) == "k1"
    assert w.key_of({"id": 7}, b"") == "7"
    assert w.key_of(None, props(message_id="m-1")) == "m-1"
    assert w.key_of({"other": "x"}, props(headers={"other": "x"})) is None
    assert Window.from_arguments({"x-message-deduplication": False}) is None
    assert Window.from_arguments({"x-message-deduplication": True, "x-cache-size": 5,
                                  "x-cache-ttl": 60000}) == Window(5, 60000)


def test_snapshot_restore_round_trip_keeps_order_and_drops_expired():
    d = Dedup()
    args = {"x-message-deduplication": True, "x-cache-size": 3}
    for key in ("a", "b", "c", "d"):
        assert d.screen("/", "ex", args, ["q"], {}, props(message_id=key), None, 10.0) == ["q"]
        assert d.screen("/", "ex", args, ["q"], {}, props(message_id=key), None, 10.0) == ["q"]  # not committed
        d.commit(10.0, True)
    added = d.take_added()
    assert [k for _, k, _ in added] == ["a", "b", "c", "d"] and d.take_added() == []
    again = Dedup()
    again.restore(added)  # the journal holds every key; the window keeps the newest three
    assert again.screen("/", "ex", args, ["q"], {}, props(message_id="a"), None, 11.0) == ["q"]
    again.commit(11.0, True)
    assert again.screen("/", "ex", args, ["q"], {}, props(message_id="d"), None, 11.0) is None
    assert [k for w, k, _ in again.snapshot(11.0) if w == window_id("exchange", "/", "ex")] == ["c", "d", "a"]


def publish(vhost, exchange, routing_key, props_raw, body):
    return vhost.broker.delivery.publish(vhost, exchange, routing_key, props_raw, body, 1000.0)


@pytest.fixture
def broker() -> Broker:
    b = Broker(ports=shell_ports(), store_enabled=True)
    b.ensure_default("/", "guest", "guest")
    b.now = 1000.0
    return b


def test_exchange_window_confirms_a_duplicate_without_routing_storing_or_mirroring(broker):
    vhost = broker.vhosts["/"]
    vhost.declare_exchange("ex", "fanout", durable=True, arguments={"x-message-deduplication": True,
                                                                  "x-cache-size": 10})
    vhost.declare_queue("q", owner=None, now=1000.0, durable=True)
    vhost.bind("ex", "q", QUEUE, "", None)
    vhost.set_mirror("ex", True)
    p = props(headers={"x-deduplication-header": "k1"}, delivery_mode=2)
    first = publish(vhost, "ex", "", p, b"one")
    ops_after_first, _ = broker.take_store_ops()
    second = publish(vhost, "ex", "", p, b"two")
    assert first.routed and second.routed  # no basic.return for a duplicate
    assert second.ticket == broker.store_ticket  # its confirm waits for what came before it
    assert broker.take_store_ops()[0] == [] and len(ops_after_first) == 1
    assert vhost.queues["q"].messages_ready == 1
    assert [[m.body for m in msgs] for msgs in broker.take_mirror_records().values()] == [[b"one"]]
    publish(vhost, "ex", "", props(headers={"x-deduplication-header": "k2"}), b"three")
    assert vhost.queues["q"].messages_ready == 2


def test_queue_window_drops_only_for_that_queue(broker):
    vhost = broker.vhosts["/"]
    vhost.declare_queue("dedup-q", owner=None, now=1000.0, arguments={"x-message-deduplication": True})
    vhost.declare_queue("plain-q", owner=None, now=1000.0)
    for q in ("dedup-q", "plain-q"):
        vhost.bind("amq.fanout", q, QUEUE, "", None)
    for _ in range(3):
        assert publish(vhost, "amq.fanout", "", props(message_id="same"), b"x").routed
    assert vhost.queues["dedup-q"].messages_ready == 1 and vhost.queues["plain-q"].messages_ready == 3
    vhost.unbind("amq.fanout", "plain-q", QUEUE, "", None)
    result = publish(vhost, "amq.fanout", "", props(message_id="same"), b"x")
    assert result.routed and vhost.queues["dedup-q"].messages_ready == 1


def test_a_refused_publish_leaves_no_key_so_its_retry_is_taken(broker):
    vhost = broker.vhosts["/"]
    vhost.declare_exchange("ex", "fanout", durable=True, arguments={"x-message-deduplication": True})
    vhost.declare_queue("full", owner=None, now=1000.0, arguments={
        "x-max-length": 1, "x-overflow": "reject-publish", "x-message-deduplication": True})
    vhost.bind("ex", "full", QUEUE, "", None)
    assert not publish(vhost, "ex", "", props(message_id="a"), b"a").rejected
    refused = publish(vhost, "ex", "", props(message_id="b"), b"b")
    assert refused.rejected and vhost.queues["full"].messages_ready == 1
    assert [k for _, k, _ in broker.delivery.dedup.take_added()] == ["a", "a"]  # exchange's and queue's
    vhost.queues["full"].purge()
    assert not publish(vhost, "ex", "", props(message_id="b"), b"b").rejected  # the retry
    assert vhost.queues["full"].messages_ready == 1
    publish(vhost, "ex", "", props(message_id="b"), b"b")  # now a duplicate
    assert vhost.queues["full"].messages_ready == 1


def test_deleting_an_exchange_or_queue_drops_its_window_and_journals_that(broker):
    vhost = broker.vhosts["/"]
    dedup = broker.delivery.dedup
    args = {"x-message-deduplication": True}
    vhost.declare_exchange("ex", "fanout", durable=True, arguments=args)
    vhost.declare_queue("q", owner=None, now=1000.0, durable=True, arguments=args)
    vhost.bind("ex", "q", QUEUE, "", None)
    publish(vhost, "ex", "", props(message_id="a"), b"a")
    vhost.delete_exchange("ex")
    vhost.delete_queue("q")
    journal = dedup.take_added()
    assert [(w.split("\x00")[0], k) for w, k, _ in journal] == [
        ("exchange", "a"), ("queue", "a"), ("exchange", None), ("queue", None)]
    vhost.declare_exchange("ex", "fanout", durable=True, arguments=args)
    vhost.declare_queue("q", owner=None, now=1000.0, durable=True, arguments=args)
    vhost.bind("ex", "q", QUEUE, "", None)
    publish(vhost, "ex", "", props(message_id="a"), b"a")
    assert vhost.queues["q"].messages_ready == 1
    recovered = Dedup()
    recovered.restore(journal)  # the drops void the keys before them
    assert recovered.snapshot(1000.0) == []


def test_publishes_read_together_are_each_screened_where_a_window_applies():
    broker = Broker(ports=shell_ports())
    broker.ensure_default("/", "guest", "guest")
    vhost = broker.vhosts["/"]
    vhost.declare_queue("plain", owner=None, now=0.0)
    vhost.declare_queue("dd", owner=None, now=0.0, arguments={"x-message-deduplication": True})
    dedup = broker.delivery.dedup
    assert not dedup.applies("/", "", {}, ["plain"], vhost.queues)
    assert dedup.applies("/", "", {}, ["plain", "dd"], vhost.queues)
    results: list = []
    run = [(props(message_id="a"), b"1"), (props(message_id="a"), b"2"), (props(message_id="b"), b"3")]
    broker.delivery.publish_run(vhost, "", "dd", run, 0.0, results)
    assert vhost.queues["dd"].messages_ready == 2  # the second "a" was a duplicate
    assert [r.routed for r in results] == [True, True, True]
    results = []
    broker.delivery.publish_run(vhost, "", "plain", run, 0.0, results)
    assert vhost.queues["plain"].messages_ready == 3 and len(results) == 3
    dedup.set_policy_arguments(window_id("queue", "/", "plain"), {"x-message-deduplication": True})
    assert dedup.applies("/", "", {}, ["plain"], vhost.queues)  # a policy's window counts too
