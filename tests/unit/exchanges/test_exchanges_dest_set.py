"""A key's or a pattern's destinations change form as they grow and shrink (a shared one-tuple, a
tuple, a dict past eight), and bindings that differ only in their arguments are one route: routing
stays exact through every form and every order of unbinding."""

from __future__ import annotations

import random

import pytest

from headrace.exchanges import Binding, DestinationKind, make_exchange
from headrace.exchanges.dest_set import TUPLE_MAX

Q = DestinationKind.QUEUE


def routed(ex, key: str) -> set[str]:
    return set(ex.route(key, None, lambda name: None).queues)


@pytest.mark.parametrize("type_, key, pattern", [("direct", "k", "k"), ("topic", "a.b", "a.*")])
def test_one_key_to_many_queues_and_back(type_, key, pattern):
    ex = make_exchange(type_, "x")
    names = [f"q{i}" for i in range(3 * TUPLE_MAX)]
    bindings = [Binding.make("x", n, Q, pattern, args) for n in names for args in (None, {"x-tag": n})]
    rng = random.Random(1)
    rng.shuffle(bindings)
    bound: set[Binding] = set()
    for b in bindings:
        assert ex.bind(b) and not ex.bind(b)
        bound.add(b)
        assert routed(ex, key) == {b.destination for b in bound}
    rng.shuffle(bindings)
    for b in bindings:
        assert ex.unbind(b) and not ex.unbind(b)
        bound.discard(b)
        assert routed(ex, key) == {b.destination for b in bound}
    assert not ex.has_bindings() and routed(ex, key) == set()


def test_keys_of_one_queue_share_its_one_tuple():
    ex = make_exchange("direct", "d")
    for i in range(5):
        ex.bind(Binding.make("d", "q", Q, f"k{i}"))
    assert len({id(ex.destinations(f"k{i}", None)) for i in range(5)}) == 1
    ex.bind(Binding.make("d", "other", Q, "k0"))
    assert {name for _, name in ex.destinations("k0", None)} == {"q", "other"}
    assert ex.destinations("k1", None) == ((Q, "q"),)
