"""Runtime parameters, limits and topic permissions in the broker core: stored, enforced where
RabbitMQ enforces them, and carried through a definitions export and import."""

from __future__ import annotations

import pytest

from headrace.server.amqp.errors import ChannelException
from headrace.server.auth import TopicPermission
from headrace.server.broker import Broker
from headrace.server.broker.definitions_io import export_definitions, import_definitions
from headrace.server.broker.topic_auth import check_topic_write
from shell_ports import shell_ports


@pytest.fixture
def broker() -> Broker:
    b = Broker(ports=shell_ports())
    b.ensure_default("/", "guest", "guest")
    return b


def test_max_queues_refuses_the_next_new_queue_but_not_a_redeclare(broker):
    vhost = broker.vhosts["/"]
    broker.parameters.set_vhost_limit("/", "max-queues", 1)
    vhost.declare_queue("a", owner=None, now=0.0)
    vhost.declare_queue("a", owner=None, now=0.0)  # an existing queue is not a new one
    with pytest.raises(ChannelException) as exc:
        vhost.declare_queue("b", owner=None, now=0.0)
    assert exc.value.reply_code == 406 and "queue limit in vhost '/' (1) is reached" in exc.value.reply_text
    broker.parameters.set_vhost_limit("/", "max-queues", -1)  # negative: no limit, as RabbitMQ's -1
    vhost.declare_queue("b", owner=None, now=0.0)


def test_limits_are_checked_by_name_and_type(broker):
    with pytest.raises(ValueError, match="unknown limit"):
        broker.parameters.set_vhost_limit("/", "max-channels", 1)
    with pytest.raises(ValueError, match="must be an integer"):
        broker.parameters.set_user_limit("guest", "max-channels", "2")


def test_topic_permission_restricts_routing_keys_on_topic_exchanges_only(broker):
    broker.users.add_user("bob", "pw")
    vhost = broker.vhosts["/"]
    broker.users.set_topic_permission("bob", "/", TopicPermission("amq.topic", "^{username}\\.", ".*"))
    check_topic_write(broker.users, vhost, "bob", "amq.topic", "bob.orders")
    with pytest.raises(ChannelException) as exc:
        check_topic_write(broker.users, vhost, "bob", "amq.topic", "alice.orders")
    assert exc.value.reply_code == 403
    assert "write access to topic 'alice.orders' in exchange 'amq.topic'" in exc.value.reply_text
    check_topic_write(broker.users, vhost, "guest", "amq.topic", "alice.orders")  # no rule for guest: unrestricted
    broker.users.set_topic_permission("bob", "/", TopicPermission("amq.direct", "^$", "^$"))
    check_topic_write(broker.users, vhost, "bob", "amq.direct", "anything")  # not a topic exchange


def test_settings_survive_an_export_and_import(broker):
    broker.users.add_user("bob", "pw")
    broker.users.set_topic_permission("bob", "/", TopicPermission("amq.topic", "^a", "^b"))
    broker.parameters.set_vhost_limit("/", "max-connections", 5)
    broker.parameters.set_user_limit("bob", "max-channels", 3)
    broker.parameters.set_parameter("federation-upstream", "/", "up", {"uri": "amqp://x"})
    broker.parameters.set_global("cluster_name", "prod")
    doc = export_definitions(broker)
    assert {"component": "vhost-limits", "name": "limits", "vhost": "/",
            "value": {"max-connections": 5}} in doc["parameters"]
    other = Broker(ports=shell_ports())
    import_definitions(other, doc, 0.0)
    assert other.users.topic_permission("bob", "/", "amq.topic") == TopicPermission("amq.topic", "^a", "^b")
    assert other.parameters.vhost_limit("/", "max-connections") == 5
    assert other.parameters.user_limit("bob", "max-channels") == 3
    assert other.parameters.list_parameters("federation-upstream") == [
        {"vhost": "/", "component": "federation-upstream", "name": "up", "value": {"uri": "amqp://x"}}]
    assert other.parameters.global_parameters == {"cluster_name": "prod"}


def test_deleting_a_vhost_or_user_drops_their_settings(broker):
    broker.add_vhost("v")
    broker.users.add_user("bob", "pw")
    broker.users.set_topic_permission("bob", "v", TopicPermission("amq.topic"))
    broker.parameters.set_vhost_limit("v", "max-queues", 1)
    broker.parameters.set_parameter("shovel", "v", "s", {})
    broker.parameters.set_user_limit("bob", "max-connections", 1)
    broker.delete_vhost("v")
    assert broker.users.topic_permissions == {} and broker.parameters.list_parameters() == []
    broker.users.delete_user("bob")
    assert broker.parameters.user_limits == {}
