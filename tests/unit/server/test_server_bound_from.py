"""The vhost's index of which exchanges are bound to each queue and exchange, against the bindings
themselves, through random sequences of declares, binds, unbinds and deletions (auto-delete too)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from headrace.exchanges import DestinationKind
from headrace.server.broker.core import Broker
from headrace.server.broker.errors import ChannelException
from shell_ports import shell_ports

Q = DestinationKind.QUEUE
E = DestinationKind.EXCHANGE
QUEUES = ["q0", "q1"]
EXCHANGES = ["e0", "e1", "e2"]

ops = st.one_of(
    st.tuples(st.just("queue"), st.sampled_from(QUEUES)),
    st.tuples(st.just("exchange"), st.sampled_from(EXCHANGES), st.sampled_from(["direct", "fanout", "topic"]),
              st.booleans()),
    st.tuples(st.just("bind"), st.sampled_from(EXCHANGES), st.sampled_from(QUEUES + EXCHANGES), st.sampled_from("aab")),
    st.tuples(st.just("unbind"), st.sampled_from(EXCHANGES), st.sampled_from(QUEUES + EXCHANGES),
              st.sampled_from("aab")),
    st.tuples(st.just("delete_queue"), st.sampled_from(QUEUES)),
    st.tuples(st.just("delete_exchange"), st.sampled_from(EXCHANGES), st.booleans()),
)


def expected_sources(vhost) -> dict[tuple[DestinationKind, str], set[str]]:
    out: dict[tuple[DestinationKind, str], set[str]] = {}
    for name, exchange in vhost.exchanges.items():
        for b in exchange.bindings():
            out.setdefault((b.kind, b.destination), set()).add(name)
    return out


@settings(max_examples=200, deadline=None)
@given(steps=st.lists(ops, min_size=10, max_size=50))
def test_bound_from_matches_the_bindings(steps):
    broker = Broker(ports=shell_ports())
    broker.ensure_default("/", "guest", "guest")
    vhost = broker.vhosts["/"]
    for step in steps:
        kind, *args = step
        try:
            if kind == "queue":
                vhost.declare_queue(args[0], owner=None, now=0.0)
            elif kind == "exchange":
                vhost.declare_exchange(args[0], args[1], auto_delete=args[2])
            elif kind in ("bind", "unbind"):
                source, dest, key = args
                getattr(vhost, kind)(source, dest, Q if dest in QUEUES else E, key, None)
            elif kind == "delete_queue":
                vhost.delete_queue(args[0])
            else:
                vhost.delete_exchange(args[0], if_unused=args[1])
        except ChannelException:
            pass  # absent, inequivalent or in use: the state must still agree
        expected = expected_sources(vhost)
        for dest_kind, names in ((Q, QUEUES), (E, EXCHANGES)):
            for name in names:
                want = expected.get((dest_kind, name), set())
                assert set(vhost.bound_from.sources(dest_kind, name)) == want, (step, dest_kind, name)
                assert vhost.bound_from.is_bound(dest_kind, name) == bool(want)
        # nothing left bound to what is gone
        assert all((k is Q and d in vhost.queues) or (k is E and d in vhost.exchanges) for k, d in expected)


def test_delete_exchange_if_unused_refuses_while_bound_to_and_then_goes():
    broker = Broker(ports=shell_ports())
    broker.ensure_default("/", "guest", "guest")
    vhost = broker.vhosts["/"]
    vhost.declare_exchange("src", "fanout")
    vhost.declare_exchange("dst", "fanout")
    vhost.bind("src", "dst", E, "", None)
    with pytest.raises(ChannelException) as info:
        vhost.delete_exchange("dst", if_unused=True)
    assert info.value.reply_code == 406
    vhost.unbind("src", "dst", E, "", None)
    vhost.delete_exchange("dst", if_unused=True)
    assert "dst" not in vhost.exchanges and not vhost.bound_from.is_bound(E, "dst")
