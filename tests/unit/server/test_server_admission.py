"""Admission at the bound on unauthenticated sockets: who is evicted, in which order."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import trio
from headrace.server.net.admission import Admission


def in_trio(body: Callable[[], Awaitable[None]]) -> Callable[[], None]:
    """Cancel scopes answer ``cancel_called`` only inside a trio run."""
    def test() -> None:
        trio.run(body)
    test.__name__ = body.__name__
    return test


@in_trio
async def test_below_the_bound_nobody_is_evicted():
    admission = Admission(3)
    tickets = [admission.enter() for _ in range(3)]
    assert len(admission) == 3 and not any(t.evicted or t.scope.cancel_called for t in tickets)


@in_trio
async def test_at_the_bound_the_one_stuck_longest_makes_room():
    admission = Admission(2)
    first, second = admission.enter(), admission.enter()
    admission.header_received(first)  # a step forward: second is now stuck longest
    third = admission.enter()
    assert second.evicted and second.scope.cancel_called
    assert not first.evicted and not third.evicted and len(admission) == 2
    fourth = admission.enter()  # first's header came before third connected
    assert first.evicted and not third.evicted and not fourth.evicted
    assert admission.evicted == 2


@in_trio
async def test_authenticated_sockets_leave_and_are_never_evicted():
    admission = Admission(1)
    logged_in = admission.enter()
    admission.leave(logged_in)
    admission.header_received(logged_in)  # a late report does not bring it back
    newcomer = admission.enter()
    assert len(admission) == 1 and not logged_in.evicted and not newcomer.evicted
    admission.leave(newcomer)
    admission.leave(newcomer)  # leaving twice (authenticated, then gone) is harmless
    assert len(admission) == 0
