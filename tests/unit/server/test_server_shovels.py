"""The shovel definition as RabbitMQ's ``shovel`` parameter, and one link's ledger of what waits
for the destination's confirms."""

from __future__ import annotations

import pytest

from headrace.server.broker.shovels import Ledger, parse_shovel, parse_uri, redact


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
