"""The headers exchange's index against the rule it narrows: through random binds and unbinds, a
message is routed to exactly the destinations a walk over every binding would give, in the same
order, whatever the mix of modes, void values, bytes, numbers, booleans and tables."""

from __future__ import annotations

from decimal import Decimal
from unittest import mock

from hypothesis import example, given, settings
from hypothesis import strategies as st

from headrace.exchanges import Binding, DestinationKind, headers as headers_exchange, make_exchange

Q = DestinationKind.QUEUE
KEYS = ["a", "b", "x-c", "d"]
VALUES = [None, "v", b"v", "w", 1, 1.0, True, False, 0, Decimal(1), [1], {"t": 1}]
MODES = [None, "all", "any", "all-with-x", "any-with-x"]

arguments = st.builds(
    lambda mode, pairs: {**({"x-match": mode} if mode else {}), **pairs},
    st.sampled_from(MODES),
    st.dictionaries(st.sampled_from(KEYS), st.sampled_from(VALUES), max_size=3),
)
headers = st.dictionaries(st.sampled_from(KEYS), st.sampled_from(VALUES), max_size=4)
steps = st.lists(st.tuples(st.booleans(), st.sampled_from(["q0", "q1", "q2", "q3"]), arguments), min_size=1,
                 max_size=30)


def holds(headers_: dict, key: str, expected) -> bool:
    """A binding pair against a message's headers, as RabbitMQ compares table values."""
    if key not in headers_:
        return False
    if expected is None:
        return True
    actual = headers_[key]
    if isinstance(actual, bytes) and isinstance(expected, str):
        actual = actual.decode()
    return bool(actual == expected) and isinstance(actual, bool) == isinstance(expected, bool)


def every_binding(bindings: list[Binding], headers_: dict) -> list[str]:
    """The destinations in binding order, by looking at every binding."""
    out: list[str] = []
    for b in bindings:
        args = b.arguments_dict()
        mode = args.get("x-match", "all")
        pairs = [(k, v) for k, v in args.items()
                 if k != "x-match" and (mode.endswith("-with-x") or not k.startswith("x-"))]
        test = all if mode.startswith("all") else any
        if b.destination not in out and test(holds(headers_, k, v) for k, v in pairs):
            out.append(b.destination)
    return out


@settings(max_examples=300, deadline=None)
@given(steps=steps, messages=st.lists(headers, min_size=1, max_size=6), scan_max=st.sampled_from([0, 3]))
@example(steps=[(True, "q0", {"x-match": "all", "a": "v"}), (True, "q1", {"x-match": "any", "b": "w", "d": 1})],
         messages=[{"a": b"v"}, {"b": b"w"}, {"d": True}, {"d": Decimal(1)}, {"d": 1.0}], scan_max=0)
@example(steps=[(True, "q0", {"a": None}), (True, "q1", {"x-match": "any", "a": None, "b": [1]}),
                (True, "q2", {"x-match": "all"}), (True, "q3", {"x-match": "any"})],
         messages=[{"a": 0}, {"b": [1]}, {}], scan_max=0)
def test_the_index_routes_as_a_walk_over_every_binding(steps, messages, scan_max):
    with mock.patch.object(headers_exchange, "SCAN_MAX", scan_max):  # the index from 0 or 3 bindings on
        check(steps, messages)


def check(steps, messages) -> None:
    ex = make_exchange("headers", "h")
    for add, queue, args in steps:
        b = Binding.make("h", queue, Q, "", args)
        if add:
            ex.bind(b)
        else:
            ex.unbind(b)
        bindings = ex.bindings()
        for message in messages:
            assert list(ex.route("", message, lambda name: None).queues) == every_binding(bindings, message)
    for b in ex.bindings():
        ex.unbind(b)
    assert not ex._index and not ex._always and not ex._rules and not ex._filed_under
