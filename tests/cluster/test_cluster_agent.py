"""The cluster agent (server/net/cluster_agent.py) with its coordinator, against a real etcd:
election, the epoch, a refused duplicate name, failover when a leader leaves or dies, and the
lease rule (a leader that cannot renew stops confirming before its lease can expire)."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import pytest
import trio

from headrace.server.cluster.coordination import Follow, Lead, Notice, Role, StopConfirming, lease_margin
from headrace.server.net.cluster_agent import ClusterAgent, ClusterError

from conftest import free_port

TTL = 2


class Node:
    """An agent and what it was told, in order, with the time it was told."""

    def __init__(self, endpoints: list[str], cluster: str, name: str, instance: str | None = None) -> None:
        self.notices: list[tuple[float, Notice]] = []
        self.agent = ClusterAgent(endpoints, cluster, name, TTL, instance or uuid.uuid4().hex,
                                  lambda n: self.notices.append((time.monotonic(), n)))
        self.scope = trio.CancelScope()
        self.ended = trio.Event()

    def last(self) -> Notice | None:
        return self.notices[-1][1] if self.notices else None

    async def leave(self) -> None:
        """Stop its tasks, then give the lease back (a graceful shutdown)."""
        self.scope.cancel()
        await self.ended.wait()
        await self.agent.leave()

    async def crash(self) -> None:
        """Stop its tasks with no revoke and no more keep-alives: as a kill -9."""
        self.scope.cancel()
        await self.ended.wait()
        await self.agent.client.aclose()

    async def until(self, check: Callable[[], bool], timeout: float = 10.0) -> None:
        with trio.fail_after(timeout):
            while not check():
                await trio.sleep(0.02)


@asynccontextmanager
async def running(nursery: trio.Nursery, node: Node) -> AsyncIterator[Node]:
    await node.agent.start()

    async def run() -> None:
        try:
            with node.scope:
                await node.agent.run()
        finally:
            node.ended.set()

    nursery.start_soon(run)
    yield node


async def test_first_node_leads_with_epoch_1_the_second_follows(etcd, cluster_name) -> None:
    async with trio.open_nursery() as nursery:
        async with running(nursery, Node([etcd.endpoint], cluster_name, "n1")) as n1:
            await n1.until(lambda: n1.last() == Lead(1))
            async with running(nursery, Node([etcd.endpoint], cluster_name, "n2")) as n2:
                await n2.until(lambda: n2.last() == Follow("n1", 1))
                assert n1.agent.may_confirm() and not n2.agent.may_confirm()
                assert n1.agent.role is Role.LEADER and n2.agent.role is Role.FOLLOWER
                await n2.leave()
            await n1.leave()
            assert [n for _, n in n1.notices] == [Lead(1)]
        nursery.cancel_scope.cancel()


async def test_a_leader_that_leaves_is_replaced_with_a_higher_epoch(etcd, cluster_name) -> None:
    async with trio.open_nursery() as nursery:
        n1 = Node([etcd.endpoint], cluster_name, "n1")
        n2 = Node([etcd.endpoint], cluster_name, "n2")
        async with running(nursery, n1), running(nursery, n2):
            await n2.until(lambda: n2.last() == Follow("n1", 1))
            await n1.leave()
            started = time.monotonic()
            await n2.until(lambda: n2.last() == Lead(2), timeout=5.0)
            assert time.monotonic() - started < 1.0  # the revoke is seen at once, not after the TTL
            await n2.leave()
        nursery.cancel_scope.cancel()


async def test_a_dead_leader_is_replaced_once_its_lease_expires(etcd, cluster_name) -> None:
    async with trio.open_nursery() as nursery:
        n1 = Node([etcd.endpoint], cluster_name, "n1")
        n2 = Node([etcd.endpoint], cluster_name, "n2")
        async with running(nursery, n1), running(nursery, n2):
            await n2.until(lambda: n2.last() == Follow("n1", 1))
            await n1.crash()
            started = time.monotonic()
            await n2.until(lambda: n2.last() == Lead(2), timeout=TTL + 5.0)
            assert time.monotonic() - started < TTL + 2.0
            await n2.leave()
        nursery.cancel_scope.cancel()


async def test_a_second_node_with_the_same_name_is_refused(etcd, cluster_name) -> None:
    async with trio.open_nursery() as nursery:
        async with running(nursery, Node([etcd.endpoint], cluster_name, "hr1@localhost")) as n1:
            twin = Node([etcd.endpoint], cluster_name, "hr1@localhost")
            with pytest.raises(ClusterError) as caught:
                await twin.agent.start()
            text = str(caught.value)
            assert "'hr1@localhost' is already a member" in text and "\n" not in text
            assert n1.agent.role is Role.LEADER  # the first one is untouched
            await n1.leave()
        nursery.cancel_scope.cancel()


async def test_the_same_node_restarted_takes_its_own_record_back(etcd, cluster_name) -> None:
    async with trio.open_nursery() as nursery:
        first = Node([etcd.endpoint], cluster_name, "n1", instance="data-dir-1")
        async with running(nursery, first):
            await first.until(lambda: first.last() == Lead(1))
            await first.crash()  # its lease and records stay until the TTL
        again = Node([etcd.endpoint], cluster_name, "n1", instance="data-dir-1")
        started = time.monotonic()
        async with running(nursery, again):
            # registered at once: the old lease is revoked, its leader key with it, and it leads
            # again with the next epoch without waiting out the old lease
            await again.until(lambda: again.last() == Lead(2), timeout=TTL + 5.0)
            assert time.monotonic() - started < 1.0
            assert [n for _, n in again.notices] == [Lead(2)]
            await again.leave()
        nursery.cancel_scope.cancel()


async def test_unreachable_etcd_at_start_is_one_line() -> None:
    node = Node([f"http://127.0.0.1:{free_port()}"], "x", "n1")
    with pytest.raises(ClusterError) as caught:
        await node.agent.start()
    assert str(caught.value).startswith("cannot reach etcd: no etcd endpoint answered")
    assert "\n" not in str(caught.value)


async def test_leader_cut_off_from_etcd_stops_confirming_before_its_lease_can_expire(etcd, cluster_name) -> None:
    async with trio.open_nursery() as nursery:
        async with running(nursery, Node([etcd.endpoint], cluster_name, "n1")) as n1:
            await n1.until(lambda: n1.last() == Lead(1))
            await n1.until(lambda: n1.agent.core.renewed_at > 0 and n1.agent.core.lease != 0)
            await trio.to_thread.run_sync(etcd.kill)  # no renewal can succeed from here on
            await n1.until(lambda: isinstance(n1.last(), StopConfirming), timeout=TTL + 2.0)
            told_at = n1.notices[-1][0]
            renewed_at = n1.agent.core.renewed_at  # the last one, an answer in flight at the kill included
            assert not n1.agent.may_confirm()
            # stopped within the margin before the earliest moment etcd could expire the lease
            assert told_at < renewed_at + TTL
            assert told_at >= renewed_at + TTL - lease_margin(TTL) - 0.05
            # etcd back with the same data: the lease was kept (etcd refreshes leases on restart),
            # so the same leader confirms again with the same epoch
            await trio.to_thread.run_sync(etcd.start)
            await n1.until(lambda: n1.last() == Lead(1), timeout=10.0)
            assert n1.agent.may_confirm()
            await n1.leave()
        nursery.cancel_scope.cancel()
