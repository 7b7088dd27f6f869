"""``server/net/etcd.py`` against a real etcd (tests/cluster/conftest.py): every call the
coordination needs, failover between endpoints, and the errors a caller has to tell apart."""

from __future__ import annotations

import time

import httpx
import pytest
import trio

from headrace.server.cluster.etcd_model import Compare, Delete, Get, Put
from headrace.server.net.etcd import EtcdClient, EtcdCompacted, EtcdUnavailable, LeaseNotFound

from conftest import free_port


async def test_put_get_prefix_delete(etcd, cluster_name) -> None:
    client = EtcdClient([etcd.endpoint])
    p = f"/{cluster_name}/".encode()
    try:
        rev = await client.put(p + b"a", b"1")
        await client.put(p + b"b", b"\x00\xff")
        await client.put(f"/{cluster_name}0".encode(), b"outside")  # the next key after the prefix
        kvs, read_at = await client.get(p + b"a")
        assert [(kv.key, kv.value, kv.version) for kv in kvs] == [(p + b"a", b"1", 1)]
        assert kvs[0].create_revision == rev and read_at > rev
        kvs, _ = await client.get(p, prefix=True)
        assert [(kv.key, kv.value) for kv in kvs] == [(p + b"a", b"1"), (p + b"b", b"\x00\xff")]
        assert await client.delete(p, prefix=True) == 2
        assert (await client.get(p, prefix=True))[0] == ()
    finally:
        await client.aclose()


async def test_lease_keepalive_revoke_and_keys_under_it(etcd, cluster_name) -> None:
    client = EtcdClient([etcd.endpoint])
    key = f"/{cluster_name}/member".encode()
    try:
        lease, ttl = await client.grant(5)
        assert ttl == 5
        await client.put(key, b"me", lease=lease)
        kvs, _ = await client.get(key)
        assert kvs[0].lease == lease
        assert await client.keep_alive(lease) == 5
        await client.revoke(lease)
        assert (await client.get(key))[0] == ()  # the key went with its lease
        with pytest.raises(LeaseNotFound):
            await client.keep_alive(lease)
        with pytest.raises(LeaseNotFound):
            await client.put(key, b"late", lease=lease)
        await client.revoke(lease)  # revoking a lease that is gone is no error
    finally:
        await client.aclose()


async def test_txn_create_if_absent_then_compare_value_and_version(etcd, cluster_name) -> None:
    client = EtcdClient([etcd.endpoint])
    key, other = f"/{cluster_name}/leader".encode(), f"/{cluster_name}/epoch".encode()
    absent = Compare(key, "CREATE", 0)
    try:
        won = await client.txn([absent], [Put(key, b"n1"), Put(other, b"1")], [Get(key)])
        assert won.succeeded and won.ranges == ((), ())
        lost = await client.txn([absent], [Put(key, b"n2")], [Get(key), Get(other)])
        assert not lost.succeeded
        assert [kv.value for kv in lost.ranges[0]] == [b"n1"] and [kv.value for kv in lost.ranges[1]] == [b"1"]
        assert (await client.txn([Compare(key, "VALUE", b"n1")], [Put(key, b"n1b")])).succeeded
        assert not (await client.txn([Compare(key, "VALUE", b"n1")], [Put(key, b"x")])).succeeded
        assert (await client.txn([Compare(key, "VERSION", 2)], [Delete(key)])).succeeded
        assert (await client.get(key))[0] == ()
    finally:
        await client.aclose()


async def test_watch_returns_the_next_change_or_nothing_at_its_deadline(etcd, cluster_name) -> None:
    client, writer = EtcdClient([etcd.endpoint]), EtcdClient([etcd.endpoint])
    key = f"/{cluster_name}/leader".encode()
    try:
        _, rev = await client.get(key)
        started = time.monotonic()
        events, next_rev = await client.watch(key, rev + 1, timeout=0.3)
        assert events == () and next_rev == rev + 1 and time.monotonic() - started < 2.0

        async def write_soon() -> None:
            await trio.sleep(0.1)
            await writer.put(key, b"n1")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(write_soon)
            events, next_rev = await client.watch(key, rev + 1, timeout=5.0)
        assert [(e.kind, e.kv.value) for e in events] == [("PUT", b"n1")]
        await writer.delete(key)
        events, after = await client.watch(key, next_rev, timeout=5.0)  # already happened: no wait
        assert [e.kind for e in events] == ["DELETE"] and after > next_rev
    finally:
        await client.aclose()
        await writer.aclose()


async def test_watch_of_a_compacted_revision_says_so(etcd, cluster_name) -> None:
    client = EtcdClient([etcd.endpoint])
    key = f"/{cluster_name}/k".encode()
    try:
        first = await client.put(key, b"1")
        last = await client.put(key, b"2")
        httpx.post(f"{etcd.endpoint}/v3/kv/compaction", json={"revision": str(last)}).raise_for_status()
        with pytest.raises(EtcdCompacted) as caught:
            await client.watch(key, first, timeout=5.0)
        assert caught.value.compact_revision == last
    finally:
        await client.aclose()


async def test_failover_to_the_endpoint_that_answers(etcd, cluster_name) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    client = EtcdClient([dead, etcd.endpoint], timeout=1.0)
    key = f"/{cluster_name}/k".encode()
    try:
        rev = await client.put(key, b"v")
        assert (await client.get(key))[0][0].value == b"v"
        events, _ = await client.watch(key, rev, timeout=2.0)
        assert events and events[0].kv.value == b"v"
    finally:
        await client.aclose()


async def test_no_endpoint_answers_is_one_line() -> None:
    dead = [f"http://127.0.0.1:{free_port()}", f"http://127.0.0.1:{free_port()}"]
    client = EtcdClient(dead, timeout=1.0)
    try:
        with pytest.raises(EtcdUnavailable) as caught:
            await client.grant(5)
        text = str(caught.value)
        assert "\n" not in text and dead[0] in text and dead[1] in text
        with pytest.raises(EtcdUnavailable):
            await client.watch(b"k", 1, timeout=1.0)
    finally:
        await client.aclose()
