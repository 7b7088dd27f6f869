"""Routing semantics per exchange type, the topic trie against a reference matcher, e2e loops."""

from __future__ import annotations

import gc
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from headrace.exchanges import (
    ArgumentError,
    Binding,
    DefaultExchange,
    DestinationKind,
    OperationNotPermitted,
    TopicExchange,
    TopicTrie,
    UnknownExchangeType,
    make_exchange,
)

Q = DestinationKind.QUEUE
E = DestinationKind.EXCHANGE


def bind(ex, dest, key="", args=None, kind=Q):
    return ex.bind(Binding.make(ex.name, dest, kind, key, args))


def routed(ex, key="", headers=None, lookup=lambda name: None):
    return sorted(ex.route(key, headers, lookup).queues)


def reference_match(pattern: str, key: str) -> bool:
    """Topic matching by regular expression over the word lists (RabbitMQ's rules)."""
    p_words = pattern.split(".") if pattern else []
    k_words = key.split(".") if key else []
    regex = ""
    for w in p_words:
        if w == "#":
            regex += r"(?:[^.\x00]*\x00)*"
        elif w == "*":
            regex += r"[^.\x00]*\x00"
        else:
            regex += re.escape(w) + r"\x00"
    return re.fullmatch(regex, "".join(w + "\x00" for w in k_words)) is not None


@pytest.mark.parametrize(
    ("pattern", "key", "expected"),
    [
        ("a.b", "a.b", True), ("a.*", "a.b", True), ("a.*", "a", False), ("a.*", "a.", True),
        ("a.#", "a", True), ("a.#", "a.b.c", True), ("#", "", True), ("*", "", False),
        ("", "", True), ("", "a", False), ("#.b", "b", True), ("*.b.#", "x.b", True),
        ("a.#.c", "a.c", True), ("a.#.c", "a.x.y.c", True), ("a.#.c", "a.x.y", False), ("*.*", "a.", True),
    ],
)
def test_topic_semantics_table(pattern, key, expected):
    ex = TopicExchange("t")
    bind(ex, "q", pattern)
    assert (routed(ex, key) == ["q"]) is expected
    assert reference_match(pattern, key) is expected


words = st.sampled_from(["a", "b", "", "*", "#"])
key_words = st.sampled_from(["a", "b", "", "c"])


@settings(max_examples=300, deadline=None)
@given(patterns=st.lists(st.lists(words, min_size=0, max_size=4).map(".".join), min_size=1, max_size=8),
       keys=st.lists(st.lists(key_words, min_size=0, max_size=4).map(".".join), min_size=1, max_size=8))
def test_trie_agrees_with_reference_matcher(patterns, keys):
    trie = TopicTrie()
    for i, p in enumerate(patterns):
        trie.add(p, i)
    for key in keys:
        expected = {i for i, p in enumerate(patterns) if reference_match(p, key)}
        assert set(trie.match(key)) == expected, (patterns, key)


def test_trie_remove_prunes_and_keeps_others():
    trie = TopicTrie()
    trie.add("a.*.c", 1)
    trie.add("a.#", 2)
    assert trie.remove("a.*.c", 1) and not trie.remove("a.*.c", 1)
    assert set(trie.match("a.b.c")) == {2} and len(trie) == 1


@settings(max_examples=300, deadline=None)
@given(patterns=st.lists(st.lists(words, min_size=0, max_size=4).map(".".join), min_size=1, max_size=8),
       removed=st.lists(st.integers(0, 7), max_size=8),
       added=st.lists(st.lists(words, min_size=0, max_size=4).map(".".join), max_size=6),
       keys=st.lists(st.lists(st.sampled_from(["a", "b", "", "c", "*", "#"]), min_size=0, max_size=4).map(".".join),
                     min_size=1, max_size=8))
def test_trie_after_removals_agrees_with_reference_matcher(patterns, removed, added, keys):
    """What is left after removing some patterns (pruned branches, shared prefixes, '*' and '#'
    nodes), and patterns added after that (on the numbers of pruned nodes), still matches as the
    reference does, keys with the words '*' and '#' included."""
    trie = TopicTrie()
    for i, p in enumerate(patterns):
        assert trie.add(p, i)
    gone = {i for i in removed if i < len(patterns)}
    for i in gone:
        assert trie.remove(patterns[i], i)
        assert not trie.remove(patterns[i], i)
    assert len(trie) == len(patterns) - len(gone)
    live = {i: p for i, p in enumerate(patterns) if i not in gone}
    for j, p in enumerate(added, start=len(patterns)):
        assert trie.add(p, j)
        live[j] = p
    assert len(trie) == len(live)
    for key in keys:
        expected = {i for i, p in live.items() if reference_match(p, key)}
        assert set(trie.match(key)) == expected, (patterns, gone, added, key)


_HAVE_GC = 1 << 14  # Py_TPFLAGS_HAVE_GC: a container type, one the collector can track


def _reachable(root: object, tracked_only: bool) -> int:
    """Containers reachable from ``root``: the ones the garbage collector tracks, or all of them
    (tracked or not: a dict of strings to ints is a container the collector does not track)."""
    seen = {id(root)}
    todo = [root]
    count = 0
    while todo:
        obj = todo.pop()
        if gc.is_tracked(obj) if tracked_only else type(obj).__flags__ & _HAVE_GC:
            count += 1
        for ref in gc.get_referents(obj):
            if id(ref) not in seen and not isinstance(ref, type):
                seen.add(id(ref))
                todo.append(ref)
    return count


def test_topic_bindings_leave_the_garbage_collector_little_to_walk():
    """A topic binding adds at most two objects the collector tracks: itself and its pattern's dict
    of destinations (a node object with its dicts per pattern word, and tuples holding the
    destination kind, made it eight, and a full collection walked them all). Unbinding everything
    leaves the exchange as it started."""
    ex = TopicExchange("t")
    bind(ex, "q", "warm.up")  # the exchange's own containers exist from here on
    ex.unbind(Binding.make("t", "q", Q, "warm.up"))
    gc.collect()  # tuples and dicts of atomic values leave the collector's sight at a collection
    base_tracked, base_all = _reachable(ex, True), _reachable(ex, False)
    n = 2000
    for i in range(n):
        bind(ex, f"q{i % 10}", f"svc{i}.*.created" if i % 2 else f"svc{i}.eu.#")
        bind(ex, f"q{i % 10}", f"svc{i}.*.created" if i % 2 else f"svc{i}.eu.#", {"x-tag": 1})  # same entry
    gc.collect()
    gc.collect()  # a tuple of tuples (frozen arguments) is untracked once its items are
    assert routed(ex, "svc7.eu.created") == ["q7"] and routed(ex, "svc8.eu.a.b") == ["q8"]
    # per pattern its two bindings and its dict of destinations; per destination (ten) its tuple,
    # its count's tuple and its dict of bindings (to unbind it when it goes); the exchange's own
    # containers
    assert _reachable(ex, True) - base_tracked <= 3 * n + 3 * 10 + 20
    for i in range(n):
        for args in (None, {"x-tag": 1}):
            assert ex.unbind(Binding.make("t", f"q{i % 10}", Q, f"svc{i}.*.created" if i % 2 else f"svc{i}.eu.#",
                                          args))
    gc.collect()
    assert _reachable(ex, False) == base_all  # (the routes above were cached; unbinding cleared that)
    assert routed(ex, "svc7.eu.created") == [] and len(ex._trie) == 0


def test_direct_bindings_share_one_tuple_per_destination():
    """A direct binding adds two tracked objects at most (the binding, its key's dict, here shared
    by two bindings), and the destination tuples in those dicts are one per destination, not one
    per key; unbinding everything leaves the exchange as it started."""
    ex = make_exchange("direct", "d")
    bind(ex, "q", "warm.up")
    ex.unbind(Binding.make("d", "q", Q, "warm.up"))
    gc.collect()
    base_tracked, base_all = _reachable(ex, True), _reachable(ex, False)
    n = 2000
    for i in range(n):
        bind(ex, f"q{i % 10}", f"user.{i}")
        bind(ex, f"q{i % 10}", f"user.{i}", {"x-tag": 1})
    gc.collect()
    gc.collect()  # a tuple of tuples (frozen arguments) is untracked once its items are
    assert routed(ex, "user.7") == ["q7"]
    # per key its two bindings and its dict; per destination (ten) its tuple, its count's tuple and
    # its dict of bindings (to unbind it when it goes); the exchange's own containers
    assert _reachable(ex, True) - base_tracked <= 3 * n + 3 * 10 + 20
    assert len({id(dest) for dests in ex._routes.values() for dest in dests}) == 10
    for i in range(n):
        for args in (None, {"x-tag": 1}):
            assert ex.unbind(Binding.make("d", f"q{i % 10}", Q, f"user.{i}", args))
    gc.collect()
    assert _reachable(ex, False) == base_all
    assert routed(ex, "user.7") == []


@pytest.mark.parametrize("type_", ["direct", "topic", "fanout", "headers"])
def test_unbind_destination_takes_that_destination_of_that_kind_only(type_):
    """A deleted queue (or exchange) takes its own bindings, in the order they were made: not a
    queue's namesake exchange's, nor another queue's; what is left routes as before."""
    ex = make_exchange(type_, "x")
    args = {"x-match": "any", "k": "v"} if type_ == "headers" else None
    made = [Binding.make("x", "a", Q, key, args) for key in ("k1", "k2", "k3")]
    for b in made:
        assert ex.bind(b)
    assert ex.bind(Binding.make("x", "a", E, "k1", args))  # an exchange called "a"
    assert ex.bind(Binding.make("x", "b", Q, "k1", args))
    assert ex.unbind_destination("a", Q) == made
    assert ex.unbind_destination("a", Q) == []
    assert {(b.kind, b.destination) for b in ex.bindings()} == {(E, "a"), (Q, "b")}
    assert routed(ex, "k1", {"k": "v"}) == ["b"]
    assert [b.destination for b in ex.unbind_destination("a", E)] == ["a"]
    assert [b.destination for b in ex.unbind_destination("b", Q)] == ["b"] and not ex.has_bindings()


def test_topic_cache_invalidated_on_bind_and_unbind():
    ex = TopicExchange("t")
    bind(ex, "q1", "x.*")
    assert routed(ex, "x.y") == ["q1"] and routed(ex, "x.y") == ["q1"]
    assert ex.cache_hits == 1 and ex.cache_misses == 1
    bind(ex, "q2", "#")
    assert routed(ex, "x.y") == ["q1", "q2"]
    ex.unbind(Binding.make("t", "q1", Q, "x.*"))
    assert routed(ex, "x.y") == ["q2"]


def test_topic_routing_with_100k_bindings_is_exact():
    ex = TopicExchange("t")
    for i in range(100_000):
        bind(ex, f"q{i % 97}", f"svc{i}.*.created")
    assert routed(ex, "svc4242.eu.created") == [f"q{4242 % 97}"]
    assert routed(ex, "svc4242.eu.deleted") == []


def test_direct_and_fanout():
    d = make_exchange("direct", "d")
    bind(d, "q1", "k")
    bind(d, "q2", "k")
    bind(d, "q3", "other")
    assert routed(d, "k") == ["q1", "q2"]
    f = make_exchange("fanout", "f")
    bind(f, "a")
    bind(f, "b", "ignored")
    assert routed(f, "anything") == ["a", "b"]


@pytest.mark.parametrize(
    ("binding_args", "headers", "expected"),
    [
        ({"x-match": "all", "a": 1, "b": "x"}, {"a": 1, "b": "x", "c": 0}, True),
        ({"x-match": "all", "a": 1, "b": "x"}, {"a": 1}, False),
        ({"x-match": "any", "a": 1, "b": "x"}, {"b": "x"}, True),
        ({"x-match": "any", "a": 1}, {"a": 2}, False),
        ({"a": 1}, {"a": 1}, True),  # all is the default
        ({"x-match": "all", "a": None}, {"a": "anything"}, True),  # void: presence only
        ({"x-match": "all", "x-k": 1}, {}, True),  # x- keys ignored
        ({"x-match": "all-with-x", "x-k": 1}, {}, False),
        ({"x-match": "any-with-x", "x-k": 1}, {"x-k": 1}, True),
        ({"x-match": "all", "a": 1}, {"a": True}, False),  # a bool is not an int
    ],
)
def test_headers_matching(binding_args, headers, expected):
    ex = make_exchange("headers", "h")
    bind(ex, "q", "", binding_args)
    assert (routed(ex, "", headers) == ["q"]) is expected


def test_headers_invalid_x_match_is_refused():
    ex = make_exchange("headers", "h")
    with pytest.raises(ArgumentError):
        bind(ex, "q", "", {"x-match": "some"})


def test_exchange_to_exchange_loop_terminates():
    exchanges = {name: make_exchange("fanout", name) for name in ("a", "b", "c")}
    bind(exchanges["a"], "b", kind=E)
    bind(exchanges["b"], "c", kind=E)
    bind(exchanges["c"], "a", kind=E)
    bind(exchanges["c"], "q")
    assert routed(exchanges["a"], "", None, exchanges.get) == ["q"]


def test_alternate_exchange_when_nothing_matched():
    main = make_exchange("direct", "main", arguments={"alternate-exchange": "ae"})
    ae = make_exchange("fanout", "ae")
    bind(main, "q", "k")
    bind(ae, "unrouted")
    lookup = {"main": main, "ae": ae}.get
    assert main.route("k", None, lookup).queues == ("q",)
    result = main.route("nope", None, lookup)
    assert result.queues == ("unrouted",) and result.used_alternate


def test_cc_and_bcc_add_routing_keys():
    d = make_exchange("direct", "d")
    for key in ("k1", "k2", "k3"):
        bind(d, key, key)
    assert routed(d, "k1", {"CC": ["k2"], "BCC": [b"k3"]}) == ["k1", "k2", "k3"]


def test_default_exchange_routes_by_queue_name_and_refuses_binds():
    existing = {"q"}
    ex = DefaultExchange(existing.__contains__)
    assert routed(ex, "q") == ["q"] and routed(ex, "missing") == []
    with pytest.raises(OperationNotPermitted):
        bind(ex, "q", "q")


def test_unknown_type_and_equivalence():
    with pytest.raises(UnknownExchangeType):
        make_exchange("bogus", "x")
    ex = make_exchange("topic", "t", durable=True)
    assert ex.equivalent("topic", True, False, False, {})
    assert not ex.equivalent("topic", False, False, False, {})


def test_binding_identity_includes_arguments():
    ex = make_exchange("direct", "d")
    assert bind(ex, "q", "k", {"a": 1}) and bind(ex, "q", "k", {"a": 2}) and not bind(ex, "q", "k", {"a": 1})
    ex.unbind(Binding.make("d", "q", Q, "k", {"a": 1}))
    assert routed(ex, "k") == ["q"]  # still bound through the other arguments
    assert ex.unbind_destination("q", Q) and routed(ex, "k") == []
