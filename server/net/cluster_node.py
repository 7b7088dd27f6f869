"""A clustered node: leads (a broker over its data directory, streaming every durable write to
the followers) or follows (a copy of the leader's directory, and the client ports forwarded to
the leader), as the cluster agent says.

Owner: ``ClusterNode`` alone holds the node's role period: the data directory's lock for the
process's lifetime, the agent, and whichever of the leader's ``App`` with its ``ReplicationLeader``
or the ``ReplicationFollower`` with its ``Forwarder``s runs now. The agent's notices only set
``notice``; the loop in ``serve`` ends the running period and starts the next.

Leading starts the broker with the same recovery a restart after ``kill -9`` runs, over files that
are exactly what the old leader wrote up to a position every in-sync node acked; so taking over
loses nothing confirmed, and unacked deliveries come back redelivered, as after a restart.
Losing the lease (or seeing another leader) stops the broker as SIGTERM does: clients reconnect
and reach the new leader through any node.

Task tree::

    serve            the agent, the signal watcher, the role loop
      lead           App.serve, the replication listener, the in-sync review
      follow         the replication client (again after each failure), the forwarded listeners
"""

from __future__ import annotations

import logging
import signal
from pathlib import Path
from collections.abc import Callable
from typing import Any, Protocol

import trio

from headrace.persistence import replica_tap
from headrace.persistence.replica_files import is_incomplete
from headrace.server.cluster.coordination import Follow, Lead, Notice
from headrace.server.cluster.replication import ReplicationError
from headrace.server.config import Settings

from .cluster_agent import ClusterAgent, ClusterError, instance_id, known_epoch, note_epoch
from .proxy import Forwarder
from .replication_follower import ReplicationFollower
from .replication_leader import ReplicationLeader
from .startup import DataDirLock, StartupError, write_ports

__all__ = ["ClusterNode"]

log = logging.getLogger("headrace")
clog = logging.getLogger("headrace.cluster")

RETRY_PAUSE = 0.2


class LeaderApp(Protocol):
    """The broker a leader runs (``server/app.App``, passed in by it: the shell below the app
    does not import it)."""

    cluster_failure: str

    async def serve(self, *, task_status: trio.TaskStatus[Any] = ...) -> None: ...

    def stop(self) -> None: ...


class ClusterNode:
    def __init__(self, settings: Settings, make_app: Callable[..., LeaderApp]) -> None:
        self.make_app = make_app
        self.settings = settings
        self.data_dir = Path(settings.storage.data_dir)
        self.lock = DataDirLock(self.data_dir)
        self.lock.acquire()
        self.notice: Lead | Follow | None = None
        self._changed = trio.Event()
        self._stopping = False
        self.failure = ""
        c = settings.cluster
        self.node = c.node_name
        host = c.cluster_host or (settings.network.amqp_host
                                  if settings.network.amqp_host not in ("", "0.0.0.0", "::") else "127.0.0.1")
        self.address: dict[str, object] = {"host": host, "amqp": settings.network.amqp_port,
                                           "http": settings.http.http_port, "cluster": c.cluster_port}
        self.agent = ClusterAgent(c.etcd_endpoints, c.cluster_id, c.node_name, c.cluster_lease_ttl_s,
                                  instance_id(self.data_dir), self._on_notice, address=self.address,
                                  known_epoch=known_epoch(self.data_dir))
        self.agent.core.blocked = is_incomplete(self.data_dir)
        self.follower = ReplicationFollower(self.data_dir, self.node, self._set_blocked)
        self.leader: ReplicationLeader | None = None
        self.app: LeaderApp | None = None  # the broker while leading

    def _set_blocked(self, blocked: bool) -> None:
        self.agent.core.blocked = blocked

    def _on_notice(self, notice: Notice) -> None:
        if isinstance(notice, Lead | Follow) and notice.epoch:
            note_epoch(self.data_dir, notice.epoch)
        if isinstance(notice, Lead | Follow) and notice != self.notice:
            self.notice = notice
            self._changed.set()

    def _check_ports(self) -> None:
        for name in ("amqp", "http", "cluster"):
            if not self.address[name]:
                raise StartupError(f"cluster: {name}_port must be a fixed port in a cluster (0 was given): the "
                                   "other nodes find this node by it")

    async def serve(self) -> None:
        try:
            self._check_ports()
            # imported now, not when the first leadership starts the HTTP listener: an import of
            # a second or more on a busy machine would block the loop and with it the lease's renewal
            import headrace.server.net.http_conn  # noqa: F401
            try:
                await self.agent.start()
            except ClusterError as exc:
                raise StartupError(f"cluster: {exc}") from None
            async with trio.open_nursery() as root:
                root.start_soon(self._run_agent, root.cancel_scope)
                root.start_soon(self._watch_signals)
                while not self._stopping:
                    notice = self.notice
                    if isinstance(notice, Lead):
                        await self._lead(notice)
                    elif isinstance(notice, Follow) and notice.leader:
                        await self._follow(notice)
                    else:
                        await self._changed.wait()
                    self._changed = trio.Event() if notice is self.notice else self._changed
                await self.agent.stop()
                root.cancel_scope.cancel()
        finally:
            self.follower.close()
            self.lock.release()
        if self.failure:
            raise StartupError(f"cluster: {self.failure}")
        log.info("stopped")

    def _stop(self) -> None:
        self._stopping = True
        self._changed.set()

    async def _run_agent(self, scope: trio.CancelScope) -> None:
        failure = await self.agent.run()
        if failure:
            self.failure = failure
            self._stop()

    async def _watch_signals(self) -> None:
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async for signum in signals:
                log.info("received %s", signal.Signals(signum).name)
                self._stop()
                return

    async def _until_changed(self, notice: Notice) -> None:
        while self.notice == notice and not self._stopping:
            changed = self._changed
            await changed.wait()
            if changed is self._changed:
                self._changed = trio.Event()

    # ------------------------------------------------------------------ leading
    async def _lead(self, notice: Lead) -> None:
        c = self.settings.cluster
        try:
            members = await self.agent.members()
        except Exception as exc:  # noqa: BLE001 - etcd's errors: lead with the set etcd gave at the campaign
            clog.warning("members not read: %s", exc)
            members = {}
        known = self.agent.core.in_sync
        in_sync = [n for n in known if n in members or n == self.node] if known is not None else []
        self.follower.close()  # its open files: the broker's writers replace files under their names
        tap = replica_tap.Tap(self.data_dir)
        replica_tap.install(tap)
        leader = self.leader = ReplicationLeader(
            tap, self.data_dir, self.node, notice.epoch, min_in_sync=c.cluster_min_in_sync,
            members=len(members), in_sync=in_sync, may_confirm=self.agent.may_confirm,
            write_in_sync=self.agent.write_in_sync, lag_timeout=c.cluster_lag_timeout_s)
        await leader.set_in_sync(set(in_sync) | {self.node})
        try:
            app = self.app = self.make_app(self.settings, lock=self.lock, replication=leader, cluster=self)
            done = trio.Event()
            asked = False

            async def run_app(task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
                try:
                    await app.serve(task_status=task_status)
                finally:
                    done.set()
                    if not asked:  # the broker stopped on its own: so does the node
                        self.failure = self.failure or app.cluster_failure
                        self._stop()

            async with trio.open_nursery() as period:
                listeners = await trio.open_tcp_listeners(c.cluster_port, host=self._bind_host())
                period.start_soon(trio.serve_listeners, leader.serve_follower, listeners)
                period.start_soon(leader.keep_in_sync)
                await period.start(run_app)
                await self._until_changed(notice)
                asked = True
                leader.stop()
                app.stop()
                await done.wait()
                period.cancel_scope.cancel()
        finally:
            replica_tap.uninstall()
            self.leader = self.app = None

    def _bind_host(self) -> str:
        host = self.settings.network.amqp_host
        return host or "0.0.0.0"

    # ------------------------------------------------------------------ following
    async def _follow(self, notice: Follow) -> None:
        assert notice.leader is not None
        try:
            members = await self.agent.members()
        except Exception as exc:  # noqa: BLE001 - etcd away: try again shortly
            clog.warning("members not read: %s", exc)
            members = {}
        record = members.get(notice.leader)
        if record is None:
            with trio.move_on_after(RETRY_PAUSE):
                await self._until_changed(notice)
            return
        host = str(record.get("host") or "127.0.0.1")
        s = self.settings
        async with trio.open_nursery() as period:
            bound = {}
            for name, bind_host, port, target in (("amqp", s.network.amqp_host, s.network.amqp_port, record.get("amqp")),
                                                  ("http", s.http.http_host, s.http.http_port, record.get("http"))):
                listeners = await trio.open_tcp_listeners(port, host=bind_host)
                bound[name] = port
                period.start_soon(trio.serve_listeners, Forwarder(host, _int(target)).handle, listeners)
            write_ports(s.network.ports_file, bound)
            log.info("%s follows %s: client connections are forwarded to it", self.node, notice.leader)
            log.info("data directory %s", self.data_dir.resolve())
            period.start_soon(self._replicate, notice, host, _int(record.get("cluster")))
            await self._until_changed(notice)
            period.cancel_scope.cancel()

    async def _replicate(self, notice: Follow, host: str, port: int) -> None:
        assert notice.leader is not None
        while True:
            try:
                await self.follower.follow(notice.leader, host, port, notice.epoch)
            except (OSError, ReplicationError, ValueError, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                clog.info("replication from %s: %s", notice.leader, exc)
            if self.follower.removed:
                self._stop()  # ``headrace cluster leave``: gone for good, its lease given back
                return
            await trio.sleep(RETRY_PAUSE)

    def leave(self, name: str) -> bool:
        """``headrace cluster leave NAME`` (asked of the leader): the follower is told to stop and
        leaves the in-sync set; the leader itself stops, handing over at once. False: unknown."""
        if name == self.node:
            self._stop()
            return True
        leader = self.leader
        return leader is not None and leader.remove(name)

    def status(self) -> list[dict[str, object]]:
        """Every node as this one sees it (the leader's view: the followers' acks and lag)."""
        leader = self.leader
        if leader is None:
            return []
        rows: list[dict[str, object]] = [{"name": self.node, "cluster_role": "leader", "in_sync": True,
                                          "replication_lag": 0, "replication_lag_bytes": 0, "running": True,
                                          "epoch": leader.epoch, "position": leader.position}]
        for name, f in sorted(leader.status().items()):
            rows.append({"name": name, "cluster_role": "follower", "in_sync": f["in_sync"],
                         "replication_lag": f["lag"], "replication_lag_bytes": f["lag_bytes"],
                         "running": f["connected"], "copying": f["copying"], "acked": f["acked"]})
        for name in sorted(leader.in_sync - {self.node} - set(leader.followers)):
            rows.append({"name": name, "cluster_role": "follower", "in_sync": True, "running": False,
                         "replication_lag": leader.position, "replication_lag_bytes": 0})
        return rows


def _int(value: object) -> int:
    return value if isinstance(value, int) else 0

