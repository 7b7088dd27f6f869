"""The cluster agent: runs this node's ``Coordinator`` against etcd in a trio task.

Owner: the ``ClusterAgent`` alone holds the node's lease, its ``EtcdClient`` and its
``Coordinator``; the rest of the node learns its role only through the ``on_notice`` callback
(``Lead(epoch)``, ``Follow(leader, epoch)``, ``StopConfirming(reason)``) and the read-only
``may_confirm(now)``.

One driver task feeds the coordinator, one event at a time, from a channel the keep-alive and
watch tasks send into, and performs the requests it returns (the transactions inline, in order),
so the state machine never sees two answers at once. The driver also wakes at the coordinator's
confirm deadline, so a node whose keep-alives stop getting through says ``StopConfirming`` on
time even with etcd silent.

``start`` does the first grant and registration before the node serves: an etcd that does not
answer, or a node name another running node holds, is a ``ClusterError`` with one line for
the caller to print before exiting non-zero. ``leave`` revokes the lease, so the others see the
node (and its leadership) go at once instead of after the TTL.
"""

from __future__ import annotations

import json
import logging
import os
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import trio

from headrace.server.cluster.coordination import (
    Coordinator,
    Fatal,
    Follow,
    Grant,
    Lead,
    Notice,
    Output,
    Revoke,
    Role,
    StopConfirming,
    Transact,
    WatchFrom,
)
from headrace.server.cluster.etcd_model import KeyValue, WatchEvent

from .etcd import EtcdClient, EtcdCompacted, EtcdError, EtcdUnavailable, LeaseNotFound

__all__ = ["EPOCH_FILE", "INSTANCE_FILE", "ClusterAgent", "ClusterError", "instance_id", "known_epoch", "note_epoch"]

log = logging.getLogger("headrace.cluster")

# how long one watch long-poll waits before it is opened again (a dead endpoint costs this much)
WATCH_POLL = 2.0
# pause after a failed keep-alive or watch before the next try
RETRY_PAUSE = 0.25
# events waiting for the driver; the keep-alive and watch tasks wait when it is full
EVENT_BUFFER = 64


# this data directory's identity in the cluster (written once; the agent is its only user)
INSTANCE_FILE = "cluster.instance"


def instance_id(data_dir: Path) -> str:
    """This data directory's id, made on first use: a node restarted on the same directory finds
    its previous process's membership record by it (the directory's lock says that process is
    gone), where another process with the same node name has another id and is refused."""
    path = data_dir / INSTANCE_FILE
    try:
        text = path.read_text().strip()
        if text:
            return text
    except FileNotFoundError:
        pass
    text = uuid.uuid4().hex
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text + "\n")
    os.replace(tmp, path)
    return text


EPOCH_FILE = "cluster.epoch"


def known_epoch(data_dir: Path) -> int:
    """The highest epoch this data directory has led or followed in (0: none yet)."""
    try:
        return int((data_dir / EPOCH_FILE).read_text().strip() or 0)
    except (FileNotFoundError, ValueError):
        return 0


def note_epoch(data_dir: Path, epoch: int) -> None:
    """Remember ``epoch`` (written and renamed: a crash leaves the old value or the new one). A
    node whose directory knows a higher epoch than etcd's refuses to join: etcd was reset or is
    another cluster's, and leading on would reuse epochs its followers already saw."""
    if epoch <= known_epoch(data_dir):
        return
    tmp = data_dir / (EPOCH_FILE + ".tmp")
    tmp.write_text(f"{epoch}\n")
    os.replace(tmp, data_dir / EPOCH_FILE)


class ClusterError(Exception):
    """The node cannot join or stay in its cluster; the text is one line for the operator."""


@dataclass(slots=True, frozen=True)
class _Renewed:
    sent_at: float
    ttl: int


@dataclass(slots=True, frozen=True)
class _LeaseLost:
    pass


@dataclass(slots=True, frozen=True)
class _LeaderEvent:
    kv: KeyValue | None


_Event = _Renewed | _LeaseLost | _LeaderEvent


class ClusterAgent:
    def __init__(
        self,
        endpoints: Sequence[str],
        cluster: str,
        node: str,
        ttl: int,
        instance: str,
        on_notice: Callable[[Notice], None],
        request_timeout: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        address: dict[str, object] | None = None,
        known_epoch: int = 0,
    ) -> None:
        self.client = EtcdClient(endpoints, timeout=request_timeout)
        self.core = Coordinator(cluster, node, ttl, instance, known_epoch, address=address)
        self.on_notice = on_notice
        self.clock = clock
        self._send, self._receive = trio.open_memory_channel[_Event](EVENT_BUFFER)
        self._watch_from = 0
        self._watch_changed = trio.Event()
        self._watch_scope = trio.CancelScope()
        self._nursery: trio.Nursery | None = None
        self._run_scope = trio.CancelScope()
        self._ended = trio.Event()

    @property
    def role(self) -> Role:
        return self.core.role

    def may_confirm(self) -> bool:
        return self.core.may_confirm(self.clock())

    async def start(self) -> None:
        """Grant the lease and register: raises ``ClusterError`` when that cannot be done."""
        try:
            await self._perform(self.core.start(self.clock()))
        except EtcdUnavailable as exc:
            await self.client.aclose()
            raise ClusterError(f"cannot reach etcd: {exc}") from None
        except ClusterError:
            await self.client.aclose()
            raise

    async def run(self) -> str | None:
        """Keep the lease, watch the leader, campaign when it is free; until ``stop`` (None), or
        until the node must not stay in the cluster: then the one line saying why (the name was
        taken by another node while this one was cut off, say), and the lease is given back."""
        failure: str | None = None
        try:
            with self._run_scope:
                async with trio.open_nursery() as nursery:
                    self._nursery = nursery
                    nursery.start_soon(self._keep_alive)
                    nursery.start_soon(self._watch)
                    await self._drive()
        except* ClusterError as group:
            failure = str(group.exceptions[0])
            log.error("%s leaves the cluster: %s", self.core.node, failure)
        finally:
            self._nursery = None
            self._ended.set()
        return failure

    async def stop(self) -> None:
        """End ``run`` (if it runs), then ``leave``: a node shutting down hands over at once."""
        self._run_scope.cancel()
        if self._nursery is not None:
            await self._ended.wait()
        await self.leave()

    async def leave(self) -> None:
        """Give the lease back (membership and leadership go at once) and close the client."""
        lease = self.core.lease
        if lease:
            with trio.move_on_after(self.client.timeout * 2):
                try:
                    await self.client.revoke(lease)
                except EtcdError as exc:
                    log.warning("could not revoke the lease on leaving: %s", exc)
        await self.client.aclose()

    async def members(self) -> dict[str, dict[str, object]]:
        """Every registered node's record (name, addresses), as etcd holds them now."""
        kvs, _ = await self.client.get(self.core.members_prefix, prefix=True)
        out: dict[str, dict[str, object]] = {}
        for kv in kvs:
            try:
                record = json.loads(kv.value)
            except ValueError:
                continue
            if isinstance(record, dict) and isinstance(record.get("node"), str):
                out[record["node"]] = record
        return out

    async def write_in_sync(self, names: list[str]) -> bool:
        """Record the in-sync set, only while this node still holds the leader key; False when it
        could not (etcd away, or the leadership gone): the caller keeps the set it had."""
        txn = self.core.in_sync_update(names)
        if txn is None:
            return False
        try:
            result = await self.client.txn(txn.compare, txn.success, txn.failure)
        except EtcdError as exc:
            log.warning("in-sync set not written: %s", exc)
            return False
        if result.succeeded:
            self.core.in_sync_written(names, result.revision)
        return result.succeeded

    # the driver
    async def _drive(self) -> None:
        while True:
            event: _Event | None = None
            with trio.move_on_at(self._deadline()):
                event = await self._receive.receive()
            now = self.clock()
            if event is None:
                await self._perform(self.core.tick(now))
            elif isinstance(event, _Renewed):
                await self._perform(self.core.renewed(event.sent_at, event.ttl))
            elif isinstance(event, _LeaseLost):
                log.warning("lease lost, joining again")
                await self._perform(self.core.lease_lost(now))
            else:
                await self._perform(self.core.leader_changed(event.kv, now))
            await self._perform(self.core.tick(self.clock()))

    def _deadline(self) -> float:
        """The coordinator's next wake as a trio deadline (trio's clock is its own)."""
        wake = self.core.next_wake()
        if wake == float("inf"):
            return wake
        return trio.current_time() + max(0.0, wake - self.clock())

    async def _perform(self, outputs: list[Output]) -> None:
        queue = list(outputs)
        while queue:
            out = queue.pop(0)
            if isinstance(out, Grant):
                sent, (lease, ttl) = await self._grant(out.ttl)
                queue.extend(self.core.lease_granted(lease, ttl, sent))
            elif isinstance(out, Transact):
                try:
                    result = await self.client.txn(out.compare, out.success, out.failure)
                except LeaseNotFound:
                    queue.extend(self.core.lease_lost(self.clock()))
                    continue
                except EtcdUnavailable as exc:
                    if self._nursery is None:  # at start: the caller reports it
                        raise
                    log.warning("%s failed, etcd unavailable: %s", out.purpose, exc)
                    queue.extend(self.core.txn_failed(out.purpose, self.clock()))
                    continue
                queue.extend(self.core.txn_done(out.purpose, result, self.clock()))
            elif isinstance(out, Revoke):
                await self.client.revoke(out.lease)
            elif isinstance(out, WatchFrom):
                self._watch_from = out.revision
                self._watch_changed.set()
                self._watch_scope.cancel()
            elif isinstance(out, Fatal):
                raise ClusterError(out.message)
            else:
                self._notify(out)

    async def _grant(self, ttl: int) -> tuple[float, tuple[int, int]]:
        """A new lease; at start one try (the caller reports), later until etcd answers."""
        while True:
            sent = self.clock()
            try:
                return sent, await self.client.grant(ttl)
            except EtcdUnavailable as exc:
                if self._nursery is None:
                    raise
                log.warning("cannot get a new lease: %s", exc)
                await trio.sleep(RETRY_PAUSE)

    def _notify(self, notice: Lead | Follow | StopConfirming) -> None:
        if isinstance(notice, Lead):
            log.info("%s leads, epoch %d", self.core.node, notice.epoch)
        elif isinstance(notice, Follow):
            log.info("%s follows %s, epoch %d", self.core.node, notice.leader or "(no leader)", notice.epoch)
        else:
            log.warning("%s stops confirming: %s", self.core.node, notice.reason)
        self.on_notice(notice)

    # the keep-alive and watch tasks
    async def _keep_alive(self) -> None:
        while True:
            wait = self.core.next_renewal() - self.clock()
            await trio.sleep(max(0.0, wait))
            lease = self.core.lease
            if not lease:
                await trio.sleep(RETRY_PAUSE)
                continue
            sent = self.clock()
            try:
                ttl = await self.client.keep_alive(lease)
            except LeaseNotFound:
                if lease == self.core.lease:
                    await self._send.send(_LeaseLost())
                    await trio.sleep(RETRY_PAUSE)
                continue
            except EtcdError as exc:
                log.warning("lease keep-alive failed: %s", exc)
                await trio.sleep(RETRY_PAUSE)
                continue
            if lease == self.core.lease:
                await self._send.send(_Renewed(sent, ttl))

    async def _watch(self) -> None:
        key = self.core.leader_key
        while True:
            if not self._watch_from:
                await self._watch_changed.wait()
            self._watch_changed = trio.Event()
            start = self._watch_from
            events: tuple[WatchEvent, ...] = ()
            after = start
            try:
                with trio.CancelScope() as self._watch_scope:
                    events, after = await self.client.watch(key, start, timeout=WATCH_POLL)
            except EtcdCompacted:
                kvs, revision = await self._reread(key)
                if start == self._watch_from:
                    self._watch_from = revision + 1
                await self._send.send(_LeaderEvent(kvs[0] if kvs else None))
                continue
            except EtcdError as exc:
                log.warning("leader watch failed: %s", exc)
                await trio.sleep(RETRY_PAUSE)
                continue
            if start == self._watch_from:  # not moved meanwhile by a new registration
                self._watch_from = after
                for event in events:
                    await self._send.send(_LeaderEvent(None if event.kind == "DELETE" else event.kv))

    async def _reread(self, key: bytes) -> tuple[tuple[KeyValue, ...], int]:
        while True:
            try:
                return await self.client.get(key)
            except EtcdError:
                await trio.sleep(RETRY_PAUSE)
