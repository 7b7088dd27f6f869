"""The leader's replication stream: ships the tap's batches to the followers, counts their acks,
keeps the in-sync set, and holds every confirm until its batch is on enough disks.

Owner: ``ReplicationLeader`` alone holds the backlog of batches sent and not yet acked by every
follower, each follower's acked position, and the in-sync set (ISR) as this leader last wrote it
to etcd. The flusher calls ``replicated`` after each group (``server/net/flusher.py``); each
follower connection is one task here (``serve_follower``), reading acks and sending from the
backlog; the in-sync set is written through the cluster agent.

The commit rule (Kafka's ISR, LavinMQ's in-sync followers): a batch is committed when it is on the
leader's disk and every follower in the in-sync set acked it, and the set (the leader included)
has at least ``min_in_sync`` nodes. A follower that stays behind for ``lag_timeout`` leaves the set
(written to etcd before the leader stops waiting for it); one that has caught up joins it again.
So every member of the set holds everything committed, and only members of the set may campaign
(``coordination.py``): a new leader never lacks a confirmed message. A leader whose lease may have
lapsed (``may_confirm`` false) confirms nothing, whatever the acks say.

A follower connects and says where it is (``Hello``): in this epoch, with its position still in
the backlog, the stream goes on from there; otherwise it gets a copy of the directory
(``replica_files.snapshot_ops``) and the batches from the copy's start on top of it.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import trio

from headrace.persistence.replica_files import snapshot_ops
from headrace.persistence.replica_tap import MAX_BATCH_BYTES, Tap
from headrace.server.net.flusher import NotCommitted
from headrace.server.cluster.replication import (Ack, Append, Closed, Heartbeat, Hello, Leave, Refuse,
                                                 ReplicationConnection, ReplicationError, Snapshot, SnapshotDone)

__all__ = ["FollowerState", "ReplicationLeader"]

log = logging.getLogger("headrace.cluster")

# batches kept for followers that are behind; past it the slowest one gets a fresh copy instead
BACKLOG_MAX_BYTES = 256 << 20
# how often an idle leader sends a heartbeat (it also ships what the tap holds)
HEARTBEAT_INTERVAL = 0.1
RECV_BYTES = 1 << 16


@dataclass(slots=True)
class FollowerState:
    name: str
    acked: int = 0
    sent: int = 0
    connected: bool = False
    copying: bool = True  # a copy is under way: not counted, not joined to the set
    leaving: bool = False  # removed by the operator: told to stop at the next wake
    consistent_at: int = 0
    ready: trio.Event = field(default_factory=trio.Event)


class ReplicationLeader:
    def __init__(self, tap: Tap, data_dir: Path, node: str, epoch: int, *, min_in_sync: int | None,
                 members: int, in_sync: list[str] | None, may_confirm: Callable[[], bool],
                 write_in_sync: Callable[[list[str]], Awaitable[bool]], lag_timeout: float) -> None:
        self.tap = tap
        self.data_dir = data_dir
        self.node = node
        self.epoch = epoch
        self.configured_min_in_sync = min_in_sync
        self.members = members  # nodes registered when this leader started
        self.may_confirm = may_confirm
        self.write_in_sync = write_in_sync
        self.lag_timeout = lag_timeout
        self.in_sync: set[str] = set(in_sync or ()) | {node}
        self.followers: dict[str, FollowerState] = {}
        self.backlog: deque[tuple[int, bytes]] = deque()
        self.backlog_bytes = 0
        self.local = tap.position  # durable here (the flusher's fsync covers it)
        self.committed = tap.position
        self._changed = trio.Event()
        self._behind_since: dict[str, float] = {}
        self._history: deque[tuple[float, int]] = deque()  # (when, position shipped), lag_timeout long
        self._isr_writing = False
        self.joining: set[str] = set()
        self.stopped = False
        self.removed: set[str] = set()  # removed by the operator while this node leads

    @property
    def min_in_sync(self) -> int:
        """Nodes (the leader included) that must hold a batch: the setting, or a majority of the
        nodes known, and never fewer than two: a confirm means on more than one node's disk."""
        if self.configured_min_in_sync is not None:
            return self.configured_min_in_sync
        known = max(self.members, len(set(self.followers) | self.in_sync))
        return max(2, known // 2 + 1)

    # ------------------------------------------------------------------ the flusher's side
    @property
    def position(self) -> int:
        return self.tap.position

    def ship(self) -> int:
        """Move what the tap holds into the backlog and, when it held something, wake the follower
        tasks; the position that covers every write made so far. An empty tap wakes nobody: the
        idle leader's tick (``keep_in_sync``) calls this every ``HEARTBEAT_INTERVAL``, and a
        follower task woken for nothing would send nothing, not even its heartbeat."""
        took = False
        while (taken := self.tap.take()) is not None:
            self.backlog.append(taken)
            self.backlog_bytes += len(taken[1])
            took = True
        if not took:
            return self.tap.position
        while self.backlog_bytes > BACKLOG_MAX_BYTES and len(self.backlog) > 1:
            _, dropped = self.backlog.popleft()
            self.backlog_bytes -= len(dropped)
        for f in self.followers.values():
            f.ready.set()
        return self.tap.position

    async def replicated(self, wait: bool) -> None:
        """Called by the flusher after a group's writes (and fsync when ``wait``): ships them, and
        when ``wait`` returns once they are committed (module docstring)."""
        position = self.ship()
        self.local = max(self.local, position)
        self._recompute()
        if wait:
            while self.committed < position or not self.may_confirm():
                if self.stopped:
                    raise NotCommitted(f"position {position} not on enough disks when leading ended")
                await self._wait_changed(HEARTBEAT_INTERVAL)

    def stop(self) -> None:
        """Leading ends: groups still waiting fail (nacks), none is confirmed."""
        self.stopped = True
        self._notify()

    async def _wait_changed(self, timeout: float) -> None:
        changed = self._changed
        with trio.move_on_after(timeout):
            await changed.wait()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    def _recompute(self) -> None:
        if len(self.in_sync) < self.min_in_sync:
            return
        acks = [self.followers[n].acked if n in self.followers and not self.followers[n].copying else 0
                for n in self.in_sync | self.joining if n != self.node]
        committed = min([self.local, *acks])
        if committed > self.committed:
            self.committed = committed
            self._notify()
        self._trim_backlog()

    def _trim_backlog(self) -> None:
        """Batches every connected follower has acked are no longer needed for a resume."""
        live = [f.acked for f in self.followers.values() if f.connected]
        floor = min(live) if live else self.committed
        while self.backlog and self.backlog[0][0] <= floor and self.backlog[0][0] <= self.committed:
            _, gone = self.backlog.popleft()
            self.backlog_bytes -= len(gone)

    # ------------------------------------------------------------------ the in-sync set
    async def keep_in_sync(self) -> None:
        """Runs while leading: ships idle writes, drops followers that stay behind, adds ones that
        caught up; each change written to etcd before it counts."""
        while True:
            await trio.sleep(HEARTBEAT_INTERVAL)
            self.local = self.ship()
            self._recompute()
            await self._review(trio.current_time())

    async def _review(self, now: float) -> None:
        """A follower is behind when it has not acked what this leader had shipped ``lag_timeout``
        ago, or has been away (or copying) that long; a follower joins once it acked everything
        committed. A joiner counts for commits from the moment it is chosen, so nothing committed
        while its etcd write runs can be missing from it."""
        history = self._history
        history.append((now, self.position))
        while len(history) > 1 and history[1][0] <= now - self.lag_timeout:
            history.popleft()
        old = history[0][1] if history[0][0] <= now - self.lag_timeout else 0
        want = set(self.in_sync)
        want -= self.removed
        for name in list(want - {self.node}):
            f = self.followers.get(name)
            if f is None or not f.connected or f.copying:
                since = self._behind_since.setdefault(name, now)
                if now - since >= self.lag_timeout:
                    want.discard(name)
            else:
                self._behind_since.pop(name, None)
                if f.acked < old:
                    want.discard(name)
        for f in self.followers.values():
            # caught up: everything committed, and all that was shipped ``lag_timeout`` ago (the
            # committed position alone would let a stalled follower, which holds it back, straight in)
            if f.name not in want and f.connected and not f.copying and f.name not in self.removed \
                    and f.acked >= max(self.committed, old):
                want.add(f.name)
        if want != self.in_sync:
            await self.set_in_sync(want)

    async def set_in_sync(self, names: set[str]) -> None:
        if self._isr_writing:
            return
        self._isr_writing = True
        self.joining = names - self.in_sync
        try:
            if await self.write_in_sync(sorted(names)):
                added, dropped = names - self.in_sync, self.in_sync - names
                self.in_sync = set(names)
                if dropped:
                    log.warning("in-sync set: %s left (behind for %.1fs)", ", ".join(sorted(dropped)), self.lag_timeout)
                if added:
                    log.info("in-sync set: %s joined", ", ".join(sorted(added)))
                for name in dropped:
                    self._behind_since.pop(name, None)
        finally:
            self.joining = set()
            self._isr_writing = False
            self._recompute()
            self._notify()

    # ------------------------------------------------------------------ one follower's connection
    async def serve_follower(self, stream: trio.abc.Stream) -> None:
        """One follower's connection, until it breaks (the follower connects again)."""
        try:
            await self._serve_follower(stream)
        except* (trio.BrokenResourceError, trio.ClosedResourceError, ReplicationError, OSError) as group:
            log.info("replication: a follower's connection ended (%s)", group.exceptions[0])
        finally:
            await trio.aclose_forcefully(stream)

    async def _serve_follower(self, stream: trio.abc.Stream) -> None:
        conn = ReplicationConnection("leader")
        await stream.send_all(conn.send(Hello(self.epoch, self.position, self.node)))
        hello = await _first(conn, stream)
        if not isinstance(hello, Hello):
            return
        old = self.followers.get(hello.node)
        if old is not None and old.connected:
            log.warning("replication: %s connected again; the older connection is dropped", hello.node)
        f = self.followers[hello.node] = FollowerState(hello.node)
        f.connected = True
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._read_acks, conn, stream, f, nursery.cancel_scope)
                await self._send_to(conn, stream, f, hello)
        finally:
            f.connected = False
            self._recompute()

    async def _send_to(self, conn: ReplicationConnection, stream: trio.abc.Stream, f: FollowerState,
                       hello: Hello) -> None:
        first = self.backlog[0][0] if self.backlog else self.position + 1
        if hello.epoch == self.epoch and 0 < hello.position and first - 1 <= hello.position <= self.position:
            f.sent = f.acked = hello.position
            f.copying = False
        else:
            await self._copy(conn, stream, f)
        while True:
            f.ready = trio.Event()
            if f.leaving:
                await stream.send_all(conn.send(Leave(self.epoch)))
                self.followers.pop(f.name, None)
                return
            while f.sent < self.position:
                if self.backlog and self.backlog[0][0] > f.sent + 1:
                    raise ReplicationError(f"{f.name} fell behind the backlog: it will get a copy")
                batch = self._batches_after(f.sent)
                await stream.send_all(b"".join(conn.send(Append(self.epoch, pos, payload)) for pos, payload in batch))
                f.sent = batch[-1][0]
            with trio.move_on_after(HEARTBEAT_INTERVAL):
                await f.ready.wait()
            if not f.ready.is_set():
                await stream.send_all(conn.send(Heartbeat(self.epoch, self.committed)))

    def _batches_after(self, sent: int) -> list[tuple[int, bytes]]:
        out, size = [], 0
        start = sent + 1 - self.backlog[0][0] if self.backlog else 0
        for i in range(max(start, 0), len(self.backlog)):
            pos, payload = self.backlog[i]
            out.append((pos, payload))
            size += len(payload)
            if size >= MAX_BATCH_BYTES:
                break
        return out

    async def _copy(self, conn: ReplicationConnection, stream: trio.abc.Stream, f: FollowerState) -> None:
        start = self.ship()
        pinned = start  # the backlog must keep every batch after ``start`` until the copy is done
        f.copying = True
        f.sent = f.acked = start
        log.info("replication: copying the data directory to %s (from position %d)", f.name, start)
        pieces = snapshot_ops(self.data_dir)
        while True:
            piece = await trio.to_thread.run_sync(next, pieces, None)
            if piece is None:
                break
            await stream.send_all(conn.send(Snapshot(self.epoch, piece)))
            if self.backlog and self.backlog[0][0] > pinned + 1:
                raise ReplicationError(f"the backlog moved past the copy for {f.name}")
        consistent_at = self.ship()
        f.consistent_at = consistent_at
        await stream.send_all(conn.send(SnapshotDone(self.epoch, start, consistent_at)))

    async def _read_acks(self, conn: ReplicationConnection, stream: trio.abc.Stream, f: FollowerState,
                         scope: trio.CancelScope) -> None:
        while True:
            data = await stream.receive_some(RECV_BYTES)
            for event in conn.receive_data(data):
                if isinstance(event, Ack):
                    if event.epoch != self.epoch:
                        continue
                    f.acked = max(f.acked, event.position)
                    if f.copying and f.acked >= f.consistent_at > 0:
                        f.copying = False
                        log.info("replication: %s has a complete copy", f.name)
                    self._recompute()
                elif isinstance(event, Refuse):
                    log.warning("replication: %s refuses epoch %d (%s)", f.name, self.epoch, event.reason)
                    scope.cancel()
                    return
                elif isinstance(event, Closed):
                    scope.cancel()
                    return

    def remove(self, name: str) -> bool:
        """The operator removes follower ``name``: it is told to stop, and the next review takes
        it out of the in-sync set (in etcd); False when no such node is known."""
        f = self.followers.get(name)
        if f is None and name not in self.in_sync:
            return False
        self.members = max(self.members - 1, 1)
        self.removed.add(name)
        if f is not None:
            f.leaving = True
            f.ready.set()
        return True

    def status(self) -> dict[str, dict[str, object]]:
        """Per follower: connected, in sync, and the lag in batches and bytes (for /api/nodes)."""
        out: dict[str, dict[str, object]] = {}
        lag_bytes = 0
        for f in self.followers.values():
            lag_bytes = sum(len(p) for pos, p in self.backlog if pos > f.acked)
            out[f.name] = {"connected": f.connected, "in_sync": f.name in self.in_sync, "copying": f.copying,
                           "acked": f.acked, "lag": max(self.position - f.acked, 0), "lag_bytes": lag_bytes}
        return out


async def _first(conn: ReplicationConnection, stream: trio.abc.Stream) -> Hello | None:
    while True:
        data = await stream.receive_some(RECV_BYTES)
        events = conn.receive_data(data)
        if events:
            first = events[0]
            return first if isinstance(first, Hello) else None
