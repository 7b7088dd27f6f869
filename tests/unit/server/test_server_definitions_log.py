"""The broker's durable changes, logged one record per changed object, rebuild the same
definitions: a real Broker, its DefinitionChanges turned into records (definitions_io) and appended
to a real DefinitionsLog, loaded back into a second Broker."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from headrace.exchanges import DestinationKind
from headrace.persistence.definitions_log import DefinitionsLog
from headrace.server.auth import Permission, TopicPermission
from headrace.server.broker import Broker
from headrace.server.broker.definitions_io import change_records, export_definitions, import_definitions
from shell_ports import shell_ports

NOW = 1_000.0
QUEUE = DestinationKind.QUEUE


def canonical(doc: dict[str, Any]) -> dict[str, list[str]]:
    return {k: sorted(json.dumps(e, sort_keys=True) for e in v) for k, v in doc.items() if isinstance(v, list)}


class Logged:
    """A broker whose batches are logged as the app does after each batch."""

    def __init__(self, tmp_path: Path) -> None:
        self.broker = Broker(ports=shell_ports(), store_enabled=True)
        self.broker.ensure_default("/", "guest", "guest")
        self.log = DefinitionsLog(tmp_path)
        assert self.log.load() is None
        self.broker.definitions.take()
        self.log.compact(export_definitions(self.broker))
        self.records = 0

    def batch(self) -> None:
        records = change_records(self.broker, self.broker.definitions.take())
        self.records += len(records)
        self.log.append(records)

    def reloaded(self, tmp_path: Path) -> Broker:
        self.log.close()
        doc = DefinitionsLog(tmp_path).load()
        assert doc is not None
        again = Broker(ports=shell_ports(), store_enabled=True)
        import_definitions(again, doc, NOW)
        return again


def test_every_kind_of_durable_change_survives_the_log(tmp_path: Path) -> None:
    logged = Logged(tmp_path)
    b = logged.broker
    v = b.add_vhost("v")
    b.users.add_user("u", "pw", ["monitoring"])
    b.users.set_permission("u", "v", Permission("c.*", "w.*", "r.*"))
    b.users.set_topic_permission("u", "v", TopicPermission("amq.topic", "a.*", "b.*"))
    b.parameters.set_user_limit("u", "max-channels", 7)
    b.parameters.set_vhost_limit("v", "max-queues", 100)
    b.parameters.set_parameter("federation-upstream", "v", "up", {"uri": "amqp://x"})
    b.parameters.set_global("cluster_name", "c1")
    b.set_policy("v", "ttl", {"pattern": "^t", "definition": {"message-ttl": 5}}, NOW)
    b.set_policy("v", "cap", {"pattern": ".*", "definition": {"max-length": 9}}, NOW, operator=True)
    logged.batch()
    v.declare_exchange("x", "topic", durable=True)
    v.declare_exchange("m", "fanout", durable=True, arguments={"x-mirror": True})
    v.declare_exchange("transient", "direct", durable=False)
    v.declare_queue("q", owner=None, now=NOW, durable=True, arguments={"x-max-length": 3})
    v.declare_queue("tq", owner=None, now=NOW, durable=False)
    v.bind("x", "q", QUEUE, "a.#", {"k": 1})
    v.bind("x", "tq", QUEUE, "b.#", None)  # transient queue: not durable
    v.bind("x", "m", DestinationKind.EXCHANGE, "c", None)
    logged.batch()
    v.set_mirror("m", False)
    v.unbind("x", "q", QUEUE, "a.#", {"k": 1})
    v.bind("x", "q", QUEUE, "z", None)
    b.parameters.clear_global("cluster_name")
    b.users.clear_topic_permissions("u", "v")
    logged.batch()
    again = logged.reloaded(tmp_path)
    assert canonical(export_definitions(again)) == canonical(export_definitions(b))
    assert "tq" not in again.vhosts["v"].queues and "transient" not in again.vhosts["v"].exchanges


def test_deleted_and_declared_again_in_one_batch_drops_what_hung_off_the_old_one(tmp_path: Path) -> None:
    logged = Logged(tmp_path)
    b = logged.broker
    v = b.add_vhost("v")
    b.users.add_user("u", "pw")
    b.users.set_permission("u", "v", Permission())
    v.declare_exchange("x", "direct", durable=True)
    v.declare_queue("q", owner=None, now=NOW, durable=True)
    v.bind("x", "q", QUEUE, "k", None)
    v.declare_queue("q2", owner=None, now=NOW, durable=True)
    v.bind("x", "q2", QUEUE, "k", None)
    logged.batch()
    v.delete_queue("q")
    v.declare_queue("q", owner=None, now=NOW, durable=True)  # no binding this time
    v.delete_exchange("x")
    v.declare_exchange("x", "direct", durable=True)
    b.users.delete_user("u")
    b.users.add_user("u", "pw")  # without its old permission
    logged.batch()
    b.delete_vhost("v")
    v = b.add_vhost("v")  # empty again
    v.declare_queue("fresh", owner=None, now=NOW, durable=True)
    logged.batch()
    again = logged.reloaded(tmp_path)
    assert canonical(export_definitions(again)) == canonical(export_definitions(b))
    assert list(again.vhosts["v"].queues) == ["fresh"]
    assert again.users.permission("u", "v") is None


def test_records_are_proportional_to_the_change_not_to_the_state(tmp_path: Path) -> None:
    logged = Logged(tmp_path)
    v = logged.broker.vhosts["/"]
    for i in range(500):
        v.declare_queue(f"q{i}", owner=None, now=NOW, durable=True)
        logged.batch()
    assert logged.records == 500  # one record per declare, however many queues there are
    again = logged.reloaded(tmp_path)
    assert len(again.vhosts["/"].queues) == 500
