"""A run of publishes placed at once (``publish_runs.py``) leaves the broker as the same publishes
placed one by one do: the same queue contents, entry deadlines, store records, results and
counts, and the same first error, with the publishes before it placed."""

from __future__ import annotations

from typing import Any

import pytest

from headrace.exchanges import DestinationKind
from headrace.server.amqp.properties import BasicProperties, encode_properties
from headrace.server.broker import Broker
from headrace.server.amqp.errors import ChannelException
from shell_ports import shell_ports

QUEUE = DestinationKind.QUEUE


def props(**kw: Any) -> bytes:
    return encode_properties(BasicProperties(**kw))


def _broker(queue_args: dict[str, Any]) -> Broker:
    broker = Broker(ports=shell_ports(), store_enabled=True)
    broker.ensure_default("/", "guest", "guest")
    vhost = broker.vhosts["/"]
    vhost.declare_exchange("fan", "fanout", durable=True)
    for name, durable in (("d1", True), ("t1", False), ("d2", True)):
        vhost.declare_queue(name, owner=None, now=0.0, durable=durable, arguments=queue_args)
        vhost.bind("fan", name, QUEUE, "", None)
    broker.delivery.store.take()  # the declares' records, if any
    return broker


def _state(broker: Broker) -> Any:
    vhost = broker.vhosts["/"]
    queues = {}
    for name in ("d1", "t1", "d2"):
        queue = vhost.queues[name]
        entries = []
        while (entry := queue.get(5.0, no_ack=True, owner=None)) is not None:
            message = entry.message
            entries.append((entry.seq, entry.expires_at, message.id, message.body, message.persistent,
                            message.priority, message.expiration_ms, message.props_raw))
        queues[name] = (entries, queue.stats.published, queue.stats.dropped)
    ops, _ = broker.delivery.store.take()
    exchange = vhost.exchanges["fan"]
    return queues, ops, exchange.published_in, exchange.published_out


RUN = [
    (props(delivery_mode=2), b"a"),
    (props(), b"b"),
    (props(delivery_mode=2, expiration="1500", priority=3), b"c"),
    (props(delivery_mode=1, timestamp=7), b"d"),
    (props(headers={"h": 1}, delivery_mode=2), b"e"),  # placed one by one, with the rest
    (props(delivery_mode=2), b"f"),
]


@pytest.mark.parametrize("queue_args", [{}, {"x-message-ttl": 2000}, {"x-max-length": 3}, {"x-max-priority": 5}])
@pytest.mark.parametrize("cut", [len(RUN), 4, 1])
def test_a_run_places_as_one_by_one(queue_args: dict[str, Any], cut: int) -> None:
    run = RUN[:cut]
    one, together = _broker(queue_args), _broker(queue_args)
    one_results = [one.delivery.publish(one.vhosts["/"], "fan", "k", p, b, 1.0) for p, b in run]
    results: list[Any] = []
    together.delivery.publish_run(together.vhosts["/"], "fan", "k", run, 1.0, results)
    assert [(r.routed, r.rejected, r.ticket) for r in results] == [(r.routed, r.rejected, r.ticket)
                                                                    for r in one_results]
    assert _state(together) == _state(one)


def test_an_invalid_expiration_stops_the_run_where_one_by_one_would() -> None:
    run = [(props(delivery_mode=2), b"a"), (props(expiration="soon"), b"b"), (props(), b"c")]
    one, together = _broker({}), _broker({})
    with pytest.raises(ChannelException) as first:
        for p, b in run:
            one.delivery.publish(one.vhosts["/"], "fan", "k", p, b, 1.0)
    results: list[Any] = []
    with pytest.raises(ChannelException) as second:
        together.delivery.publish_run(together.vhosts["/"], "fan", "k", run, 1.0, results)
    assert str(first.value) == str(second.value) and "invalid expiration" in str(second.value)
    assert len(results) == 1
    assert _state(together) == _state(one)
