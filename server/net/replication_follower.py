"""A follower's replication client: connects to the leader's replication listener, writes what it
sends into this node's data directory, fsyncs, and acknowledges.

Owner: ``ReplicationFollower`` alone holds the follower's ``FollowerLog`` (the newest epoch seen
and the durable position) and its ``ReplicaFiles`` (the files it writes); the node
(``cluster_node.py``) runs ``follow`` while this node follows, and only one at a time.

Every read is one step: the frames it completes are applied together in a worker thread, synced
once, then acknowledged with one ``Ack`` of the last position: the follower's group commit. An
older epoch's frames are refused (``Refuse``) and the connection ends: a stale leader cannot write.
The position lives in memory only: a follower that restarts gets a fresh copy (``Snapshot``), which
is also how a node that led in an older epoch cuts its files back to what the cluster committed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import trio

from headrace.persistence.replica_files import ReplicaFiles, is_incomplete
from headrace.server.cluster.replication import (Ack, Append, Closed, FollowerLog, Gap, Heartbeat, Hello, Leave,
                                                 Refuse, ReplicationConnection, ReplicationError, Snapshot,
                                                 SnapshotDone)

__all__ = ["ReplicationFollower"]

log = logging.getLogger("headrace.cluster")

RECV_BYTES = 1 << 20
# a leader that sends nothing for this long (it heartbeats every 0.1 s) is given up on
SILENCE_TIMEOUT = 3.0


class ReplicationFollower:
    def __init__(self, data_dir: Path, node: str, on_blocked: Callable[[bool], None]) -> None:
        """``on_blocked(True)`` when a copy starts (the node must not campaign: its files are half
        a copy), ``(False)`` when it is complete; called from the worker thread (a flag's write)."""
        self.on_blocked = on_blocked
        self.data_dir = data_dir
        self.node = node
        self.files = ReplicaFiles(data_dir)
        self.log = FollowerLog(0, 0)
        self.copying = False
        self.consistent_at = 0
        self.connected_to = ""
        self.removed = False  # the leader said ``Leave``: the node stops

    @property
    def complete(self) -> bool:
        return not self.copying and not is_incomplete(self.data_dir)

    async def follow(self, leader: str, host: str, port: int, epoch: int) -> None:
        """One connection to the leader, until it ends (raises ``OSError`` or ``ReplicationError``
        on a failure, returns on a clean close or a refusal)."""
        if self.connected_to != leader or epoch != self.log.epoch or self.copying:
            self.log.position = 0  # another leader, or a copy cut short: a fresh copy
            self.copying, self.consistent_at = False, 0
        self.log.epoch = max(self.log.epoch, epoch)
        self.files.close()  # nothing kept open from an earlier period (module docstring of replica_files)
        stream = await trio.open_tcp_stream(host, port)
        self.connected_to = leader
        conn = ReplicationConnection("follower")
        try:
            await stream.send_all(conn.send(Hello(self.log.epoch, self.log.position, self.node)))
            while True:
                with trio.move_on_after(SILENCE_TIMEOUT) as quiet:
                    data = await stream.receive_some(RECV_BYTES)
                if quiet.cancelled_caught:
                    raise ReplicationError(f"nothing from {leader} for {SILENCE_TIMEOUT}s")
                if not await self._step(conn, stream, data):
                    return
        finally:
            await trio.aclose_forcefully(stream)

    async def _step(self, conn: ReplicationConnection, stream: trio.abc.Stream, data: bytes) -> bool:
        work: list[Snapshot | Append | SnapshotDone] = []
        end = False
        for event in conn.receive_data(data):
            if isinstance(event, Hello):
                refused = self.log.hello(event)
                if refused is not None:
                    await stream.send_all(conn.send(refused))
                    return False
            elif isinstance(event, Closed):
                end = True
            elif isinstance(event, Leave):
                if self.log.hello(Hello(event.epoch, 0, "-")) is None:  # only the current leader's
                    log.warning("replication: %s removed this node from the cluster: it stops", self.connected_to)
                    self.removed = True
                    return False
            elif isinstance(event, Heartbeat):
                refused = self.log.heartbeat(event)
                if refused is not None:
                    await stream.send_all(conn.send(refused))
                    return False
            elif isinstance(event, (Snapshot, Append, SnapshotDone)):
                work.append(event)
        if work:
            ack = await trio.to_thread.run_sync(self._apply, work)
            if isinstance(ack, Refuse):
                await stream.send_all(conn.send(ack))
                return False
            if ack is not None:
                await stream.send_all(conn.send(ack))
        return not end

    def _apply(self, work: list[Snapshot | Append | SnapshotDone]) -> Ack | Refuse | None:
        """In a worker thread: write, sync once, and say what to acknowledge."""
        wrote = False
        for event in work:
            if isinstance(event, Snapshot):
                refused = self.log.snapshot(event.epoch)
                if refused is not None:
                    return refused
                if not self.copying:
                    self.copying = True
                    self.on_blocked(True)
                    self.files.mark_incomplete()
                self.files.apply(event.payload)
            elif isinstance(event, SnapshotDone):
                refused = self.log.snapshot_done(event)
                if refused is not None:
                    return refused
                self.consistent_at = event.consistent_at
                wrote = True
            else:
                checked = self.log.check(event)
                if isinstance(checked, Refuse):
                    return checked
                if isinstance(checked, Gap):
                    raise ReplicationError(f"append {checked.got} does not follow {checked.expected - 1}")
                self.files.apply(event.payload)
                self.log.written(event)
                wrote = True
        self.files.sync()
        if self.copying and self.consistent_at and self.log.position >= self.consistent_at:
            self.files.mark_complete()
            self.copying = False
            self.on_blocked(False)
            log.info("replication: the copy from %s is complete at position %d", self.connected_to, self.log.position)
        return Ack(self.log.epoch, self.log.position) if wrote else None

    def close(self) -> None:
        self.files.close()
