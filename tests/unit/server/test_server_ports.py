"""The broker hands each of the shell's ports to the part that calls it: every port is a plain
``Callable``, so a port given to the wrong part (the flusher's wake to the mirror outbox) would pass
the type check and fail silently. A stand-in of the shell counts the calls of each port."""

from __future__ import annotations

from headrace.server.amqp.properties import BasicProperties, encode_properties
from headrace.server.auth import Permission
from headrace.server.broker import Broker
from shell_ports import StandInShell

NOW = 1000.0
PERSISTENT = encode_properties(BasicProperties(delivery_mode=2))


def broker_with(shell: StandInShell) -> Broker:
    b = Broker(ports=shell.ports(), store_enabled=True)
    b.ensure_default("/", "guest", "guest")
    return b


def test_the_first_store_op_wakes_the_flusher_and_nothing_else():
    shell = StandInShell()
    b = broker_with(shell)
    vhost = b.vhosts["/"]
    vhost.declare_queue("d", now=NOW, owner=None, durable=True)
    shell.wakes.clear()
    b.delivery.publish(vhost, "", "d", PERSISTENT, b"one", NOW)
    b.delivery.publish(vhost, "", "d", PERSISTENT, b"two", NOW)  # the outbox was not empty: no wake
    assert dict(shell.wakes) == {"wake_flusher": 1}
    b.take_store_ops()
    b.delivery.publish(vhost, "", "d", PERSISTENT, b"three", NOW)  # empty again: woken again
    assert dict(shell.wakes) == {"wake_flusher": 2}


def test_the_first_mirror_record_wakes_the_mirror_writer():
    shell = StandInShell()
    b = broker_with(shell)
    vhost = b.vhosts["/"]
    vhost.declare_exchange("events", "fanout")
    vhost.set_mirror("events", True)
    shell.wakes.clear()
    b.delivery.publish(vhost, "events", "k", b"\x00\x00", b"m", NOW)
    b.delivery.publish(vhost, "events", "k", b"\x00\x00", b"m", NOW)
    assert shell.wakes["wake_mirror_writer"] == 1 and shell.wakes["wake_flusher"] == 0


def test_an_earlier_deadline_wakes_the_clock_a_later_one_does_not():
    shell = StandInShell()
    b = broker_with(shell)
    vhost = b.vhosts["/"]
    vhost.declare_queue("slow", now=NOW, owner=None, arguments={"x-message-ttl": 60_000})
    vhost.declare_queue("fast", now=NOW, owner=None, arguments={"x-message-ttl": 100})
    shell.wakes.clear()
    b.delivery.publish(vhost, "", "slow", b"\x00\x00", b"m", NOW)  # the first deadline there is
    b.delivery.publish(vhost, "", "slow", b"\x00\x00", b"m", NOW + 1)  # behind the head: nothing moves
    assert dict(shell.wakes) == {"wake_clock": 1}
    b.delivery.publish(vhost, "", "fast", b"\x00\x00", b"m", NOW + 1)  # earlier than the one known
    assert dict(shell.wakes) == {"wake_clock": 2}


def test_a_policy_change_and_a_user_deletion_reach_the_shell():
    shell = StandInShell()
    b = broker_with(shell)
    b.users.add_user("bob", "pw")
    b.users.set_permission("bob", "/", Permission())
    shell.wakes.clear()
    b.set_policy("/", "cap", {"pattern": ".*", "definition": {"max-length": 10}}, NOW)
    assert b.clear_policy("/", "cap", NOW)
    assert b.users.delete_user("bob")
    assert dict(shell.wakes) == {"policies_changed": 2, "user_deleted": 1}
