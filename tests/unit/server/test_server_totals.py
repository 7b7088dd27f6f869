"""Node-wide totals never go down: what deleted queues, exchanges and vhosts counted stays in
``broker.retired``. Real Broker and VHost objects, publishes through the delivery owner."""

from __future__ import annotations

from headrace.exchanges import DestinationKind
from headrace.server.amqp.properties import BasicProperties, encode_properties
from headrace.server.broker import Broker
from headrace.server.broker.totals import node_totals
from shell_ports import shell_ports

NOW = 1000.0
PROPS = encode_properties(BasicProperties())


def totals(broker: Broker) -> tuple[int, int, int, int]:
    by_type, vt = node_totals(broker.retired, broker.vhosts.values())
    return by_type["classic"].published, by_type["classic"].delivered, vt.published, vt.unroutable


def test_deleted_queue_exchange_and_vhost_keep_their_counts() -> None:
    broker = Broker(ports=shell_ports())
    broker.ensure_default("/", "guest", "guest")
    broker.add_vhost("other")
    for name in ("/", "other"):
        v = broker.vhosts[name]
        v.declare_queue("q", owner=None, now=NOW, durable=False)
        v.declare_exchange("x", "fanout")
        v.bind("x", "q", DestinationKind.QUEUE, "", None)
    for name in ("/", "other"):
        v = broker.vhosts[name]
        broker.delivery.publish(v, "x", "", PROPS, b"a", NOW)
        broker.delivery.publish(v, "", "q", PROPS, b"b", NOW)
        broker.delivery.publish(v, "", "nowhere", PROPS, b"c", NOW)
        assert broker.delivery.get(v, v.get_queue("q"), NOW, no_ack=True, owner=None) is not None
    assert totals(broker) == (4, 2, 6, 2)
    broker.vhosts["/"].delete_queue("q")
    assert totals(broker) == (4, 2, 6, 2)
    broker.vhosts["/"].delete_exchange("x")
    assert totals(broker) == (4, 2, 6, 2)
    assert broker.delete_vhost("other")
    assert totals(broker) == (4, 2, 6, 2)
    assert broker.retired.queues["classic"].published == 4
