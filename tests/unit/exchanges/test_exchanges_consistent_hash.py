"""The x-consistent-hash exchange: spread by weight, stability, minimal movement, the plugin's errors."""

from __future__ import annotations

from collections import Counter

import pytest

from headrace.exchanges import ArgumentError, Binding, DestinationKind, make_exchange

Q = DestinationKind.QUEUE
E = DestinationKind.EXCHANGE
KEYS = [f"order-{i}" for i in range(30_000)]


def bind(ex, dest, weight, kind=Q, args=None):
    return ex.bind(Binding.make(ex.name, dest, kind, weight, args))


def unbind(ex, dest, weight, kind=Q):
    return ex.unbind(Binding.make(ex.name, dest, kind, weight))


def owner(ex, key="", headers=None, properties=None, lookup=lambda name: None):
    queues = ex.route(key, headers, lookup, properties).queues
    assert len(queues) <= 1
    return queues[0] if queues else None


def placement(ex, keys=KEYS):
    return {key: owner(ex, key) for key in keys}


def test_spread_follows_the_weights():
    ex = make_exchange("x-consistent-hash", "c")
    weights = {"q1": 1, "q2": 1, "q3": 2, "q4": 2}
    for name, weight in weights.items():
        bind(ex, name, str(weight))
    counts = Counter(placement(ex).values())
    total = sum(weights.values())
    for name, weight in weights.items():
        expected = len(KEYS) * weight / total
        assert abs(counts[name] - expected) < 0.25 * expected, counts


def test_same_key_same_queue_and_independent_of_bind_order():
    one = make_exchange("x-consistent-hash", "c")
    other = make_exchange("x-consistent-hash", "c")
    for name in ("a", "b", "c", "d"):
        bind(one, name, "3")
    for name in ("d", "c", "b", "a"):
        bind(other, name, "3")
    first = placement(one)
    assert placement(one) == first
    assert placement(other) == first  # a restart binds in another order: same routes


def test_adding_a_binding_moves_only_its_share():
    ex = make_exchange("x-consistent-hash", "c")
    for i in range(5):
        bind(ex, f"q{i}", "1")
    before = placement(ex)
    bind(ex, "q5", "1")
    after = placement(ex)
    moved = [key for key in KEYS if before[key] != after[key]]
    assert all(after[key] == "q5" for key in moved)  # keys only move to the new queue
    assert 0.5 / 6 < len(moved) / len(KEYS) < 1.5 / 6  # about its share, 1/6
    unbind(ex, "q5", "1")
    assert placement(ex) == before  # removing it gives back exactly those keys


def test_removing_a_binding_moves_only_its_keys():
    ex = make_exchange("x-consistent-hash", "c")
    for i in range(4):
        bind(ex, f"q{i}", "2")
    before = placement(ex)
    unbind(ex, "q1", "2")
    after = placement(ex)
    assert all(after[key] == before[key] for key in KEYS if before[key] != "q1")
    assert "q1" not in after.values()


def test_no_binding_routes_nowhere():
    ex = make_exchange("x-consistent-hash", "c")
    assert owner(ex, "k") is None
    bind(ex, "q", "1")
    unbind(ex, "q", "1")
    assert owner(ex, "k") is None


@pytest.mark.parametrize("key, text", [
    ("abc", 'The binding key must be an integer: <<"abc">>'),
    ("", 'The binding key must be an integer: <<"">>'),
    ("1.5", 'The binding key must be an integer: <<"1.5">>'),
    (" 1", 'The binding key must be an integer: <<" 1">>'),
    ("0", "The binding key must be greater than 0"),
    ("-3", "The binding key must be greater than 0"),
    ("1001", "The binding key must be at most 1000"),
])
def test_bad_weight_is_refused(key, text):
    ex = make_exchange("x-consistent-hash", "c")
    with pytest.raises(ArgumentError) as info:
        bind(ex, "q", key)
    assert str(info.value) == text
    assert not ex.has_bindings()


def test_hash_header_routes_on_the_header():
    ex = make_exchange("x-consistent-hash", "c", arguments={"hash-header": "user"})
    for i in range(8):
        bind(ex, f"q{i}", "1")
    by_user = {u: owner(ex, "ignored", {"user": u}) for u in ("ann", "bob", "cy", "dee", "eve")}
    for u, queue in by_user.items():
        assert {owner(ex, f"rk-{i}", {"user": u}) for i in range(50)} == {queue}  # the key does not matter
    assert len(set(by_user.values())) > 1
    assert len({owner(ex, f"rk-{i}", {"other": 1}) for i in range(50)}) == 1  # missing: one place
    assert owner(ex, "x", {"user": b"ann"}) == by_user["ann"]  # bytes and text alike


def test_hash_property_routes_on_the_property():
    ex = make_exchange("x-consistent-hash", "c", arguments={"hash-property": "message_id"})
    assert ex.wants_properties
    for i in range(8):
        bind(ex, f"q{i}", "1")
    spread = {owner(ex, "same-key", None, {"message_id": f"m{i}"}) for i in range(200)}
    assert len(spread) == 8
    assert owner(ex, "a", None, {"message_id": "m1"}) == owner(ex, "b", None, {"message_id": "m1"})
    stamp = make_exchange("x-consistent-hash", "t", arguments={"hash-property": "timestamp"})
    bind(stamp, "q", "1")
    assert owner(stamp, "k", None, {"timestamp": 1700000000}) == "q"


def test_plain_exchanges_do_not_ask_for_properties():
    assert not make_exchange("direct", "d").wants_properties
    assert not make_exchange("x-consistent-hash", "c").wants_properties
    assert not make_exchange("x-consistent-hash", "c", arguments={"hash-header": "h"}).wants_properties


@pytest.mark.parametrize("args, text", [
    ({"hash-header": "a", "hash-property": "message_id"}, "hash-header and hash-property are mutually exclusive"),
    ({"hash-property": "app_id"}, "Unsupported property: app_id"),
    ({"hash-header": 5}, "Invalid argument, 'hash-header' must be a string"),
])
def test_bad_arguments_are_refused(args, text):
    with pytest.raises(ArgumentError) as info:
        make_exchange("x-consistent-hash", "c", arguments=args)
    assert str(info.value) == text


def test_exchange_destination_is_followed():
    ex = make_exchange("x-consistent-hash", "c")
    inner = make_exchange("fanout", "inner")
    inner.bind(Binding.make("inner", "q-inner", Q, ""))
    bind(ex, "inner", "1", kind=E)
    assert ex.route("k", None, {"inner": inner}.get).queues == ("q-inner",)
