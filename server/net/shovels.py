"""The dynamic shovels' supervisor: one trio task per ``shovel`` runtime parameter.

Owner: the ``App`` holds one ``Shovels``, which owns the running shovels (``ShovelRun``: its
task's cancel scope, state, reason and counters). The definitions are the broker's runtime
parameters; ``definitions_changed`` (called by ``App.after_batch`` with the batch's changes) wakes
the supervisor, which starts, restarts (the value changed) or stops shovels until the running set
matches the parameters. At start-up it does the same with the recovered parameters, so a shovel
restarts with the broker. A shovel whose ``src-delete-after`` count is moved clears its own
parameter, as RabbitMQ's does.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from functools import partial
from dataclasses import dataclass, field
from typing import Any

import trio

from headrace.server.broker import Broker
from headrace.server.broker.definition_changes import Change
from headrace.server.broker.federation import LinkKey, federation_links, queue_wants
from headrace.server.broker.node import NODE_NAME
from headrace.server.broker.shovels import Endpoint, Ledger, ShovelSpec, parse_shovel, parse_uri, redact
from headrace.server.net.shovel_link import LinkError, Peer, open_peer, run_link

__all__ = ["ShovelRun", "Shovels"]

log = logging.getLogger("headrace.shovel")

COMPONENT = "shovel"
# what can start or stop a shovel or a federation link (a policy naming an upstream, an exchange's
# bindings, which its link binds on the upstream)
_WATCHED = frozenset({"parameters", "vhosts", "policies", "exchanges", "bindings", "queues"})
MAX_BACKOFF = 30.0


@dataclass(slots=True)
class ShovelRun:
    vhost: str
    name: str
    value: Any
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    state: str = "starting"
    reason: str = ""
    since: float = field(default_factory=time.time)
    spec: ShovelSpec | None = None
    ledger: Ledger | None = None
    forwarded: int = 0  # settled at the source over every link, for the status and the count
    upstream: str | None = None  # a federation link's upstream (its ``name`` is the exchange)
    total: int | None = None  # messages to move in all (``src-delete-after``), once known

    def link_status(self) -> dict[str, Any]:
        """RabbitMQ's ``/api/federation-links`` entry of an exchange or a queue link."""
        spec = self.spec
        out: dict[str, Any] = {
            "node": NODE_NAME, "vhost": self.vhost, "upstream": self.upstream,
            "id": f"{self.vhost}/{self.name}/{self.upstream}",
            "status": "error" if self.state == "terminated" else self.state,
            "timestamp": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.since))}
        if type(self.value) is ShovelSpec and self.value.on_demand:
            out.update({"type": "queue", "queue": self.name, "upstream_queue": self.value.src_queue})
        else:
            out.update({"type": "exchange", "exchange": self.name,
                        "upstream_exchange": spec.src_exchange if spec is not None else None})
        if spec is not None:
            out["uri"] = redact(spec.src_uris[0])
        if self.state == "terminated":
            out["error"] = self.reason
        return out

    def set_state(self, state: str, reason: str = "") -> None:
        self.state, self.reason, self.since = state, reason, time.time()

    def status(self) -> dict[str, Any]:
        """RabbitMQ's ``/api/shovels`` entry for a dynamic shovel (3.10's keys, with 4.1's counters)."""
        out: dict[str, Any] = {"node": NODE_NAME, "name": self.name, "vhost": self.vhost, "type": "dynamic",
                               "state": self.state,
                               "timestamp": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.since))}
        if self.state == "terminated":
            out["reason"] = self.reason
        spec = self.spec
        if spec is None or self.state != "running":
            return out
        ledger = self.ledger
        moved = self.forwarded + (ledger.acked if ledger is not None else 0)
        out.update({"src_uri": redact(spec.src_uris[0]), "src_protocol": "amqp091", "dest_protocol": "amqp091",
                    "dest_uri": redact(spec.dest_uris[0]), "blocked_status": "running",
                    "forwarded": moved, "pending": 0,
                    "remaining": "unlimited" if self.total is None else max(self.total - moved, 0),
                    "remaining_unacked": len(ledger.waiting) if ledger is not None else 0})
        if spec.src_queue is not None:
            out["src_queue"] = spec.src_queue
        else:
            out["src_exchange"], out["src_exchange_key"] = spec.src_exchange, spec.src_exchange_key
        if spec.dest_queue is not None:
            out["dest_queue"] = spec.dest_queue
        elif spec.dest_exchange is not None:
            out["dest_exchange"] = spec.dest_exchange
            if spec.dest_exchange_key is not None:
                out["dest_exchange_key"] = spec.dest_exchange_key
        return out


class Shovels:
    def __init__(self, broker: Broker, local: Callable[[], tuple[str, int]], default_user: str, default_pass: str,
                 after_batch: Callable[[], int]) -> None:
        self.broker = broker
        self.local = local  # this broker's AMQP listener, for ``amqp://`` without a host
        self.default_user = default_user
        self.default_pass = default_pass
        self.after_batch = after_batch  # logs the self-deletion of a finished shovel
        self.runs: dict[tuple[str, str], ShovelRun] = {}
        self.links: dict[LinkKey, ShovelRun] = {}  # federation links, run the same way
        self._wake = trio.Event()
        self._nursery: trio.Nursery | None = None

    def definitions_changed(self, changes: Iterable[Change]) -> None:
        if any(c.section in _WATCHED for c in changes):
            self._wake.set()

    def status(self, vhost: str | None = None) -> list[dict[str, Any]]:
        return [run.status() for key, run in sorted(self.runs.items()) if vhost is None or key[0] == vhost]

    def link_status(self, vhost: str | None = None) -> list[dict[str, Any]]:
        return [run.link_status() for key, run in sorted(self.links.items(), key=lambda kv: repr(kv[0]))
                if vhost is None or key.vhost == vhost]

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            while True:
                try:
                    self._reconcile(nursery)
                except Exception:  # a fault of ours leaves the running links as they are, never ends the broker
                    log.exception("shovels and federation links could not be brought up to date")
                await self._wake.wait()
                self._wake = trio.Event()

    def stop(self) -> None:
        """Broker shutdown: every shovel ends before the connections are closed."""
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel()

    def _reconcile(self, nursery: trio.Nursery) -> None:
        wanted = {(v, n): value for (c, v, n), value in self.broker.parameters.parameters.items() if c == COMPONENT}
        for key, run in list(self.runs.items()):
            if key not in wanted or wanted[key] != run.value:
                run.scope.cancel()
                del self.runs[key]
        for key, value in wanted.items():
            if key not in self.runs:
                run = self.runs[key] = ShovelRun(key[0], key[1], value)
                nursery.start_soon(self._supervise, run)
        links = federation_links(self.broker)
        for link, run in list(self.links.items()):
            if link not in links or links[link] != run.value:  # a binding, the upstream or the policy changed
                run.scope.cancel()
                del self.links[link]
        for link, spec in links.items():
            if link not in self.links:
                run = self.links[link] = ShovelRun(link.vhost, link.exchange, spec, upstream=link.upstream)
                nursery.start_soon(self._supervise, run)

    async def _supervise(self, run: ShovelRun) -> None:
        """Links one after another, with a growing pause after each failure (reset once a link ran)."""
        with run.scope:
            try:
                run.spec = run.value if type(run.value) is ShovelSpec else parse_shovel(run.value, run.name, run.vhost)
            except ValueError as exc:
                run.set_state("terminated", f"invalid definition: {exc}")
                return
            spec = run.spec
            delay = spec.reconnect_delay
            attempt = 0
            while True:
                run.set_state("starting")
                started = trio.current_time()
                try:
                    await self._link(run, spec, attempt)
                    break  # the count of src-delete-after is moved
                except LinkError as exc:
                    run.set_state("terminated", str(exc))
                    log.info("shovel '%s' in vhost '%s': %s", run.name, run.vhost, exc)
                except Exception as exc:  # a fault of ours ends this link only, never the broker
                    run.set_state("terminated", f"internal error: {exc!r}")
                    log.exception("shovel '%s' in vhost '%s' failed", run.name, run.vhost)
                finally:
                    if run.ledger is not None:
                        run.forwarded += run.ledger.acked
                        run.ledger = None
                if trio.current_time() - started > 2 * MAX_BACKOFF:
                    delay = spec.reconnect_delay
                attempt += 1
                await trio.sleep(delay)
                delay = min(max(delay, 0.5) * 2, MAX_BACKOFF)
        if run.upstream is None and self.runs.get((run.vhost, run.name)) is run:
            del self.runs[(run.vhost, run.name)]
            log.info("shovel '%s' in vhost '%s' moved its %s messages: deleted", run.name, run.vhost, run.total)
            self.broker.parameters.clear_parameter(COMPONENT, run.vhost, run.name)
            self.after_batch()

    async def _link(self, run: ShovelRun, spec: ShovelSpec, attempt: int) -> None:
        src_uri = spec.src_uris[attempt % len(spec.src_uris)]
        dest_uri = spec.dest_uris[attempt % len(spec.dest_uris)]
        name = f"Shovel {run.name}" if run.upstream is None else f"Federation link (upstream: {run.upstream})"
        dest = await self._open(parse_uri(dest_uri, run.vhost), name, "destination")
        try:
            src = await self._open(parse_uri(src_uri, run.vhost), name, "source")
            try:
                def remaining(count: int) -> int | None:
                    if spec.delete_after == "never":
                        return None
                    if run.total is None:  # fixed once: the queue's length when the shovel first ran
                        run.total = count if spec.delete_after == "queue-length" else int(spec.delete_after)
                    return max(run.total - run.forwarded, 0)

                def ledger_made(ledger: Ledger) -> None:
                    run.ledger = ledger
                    run.set_state("running")

                wants = watch = None
                if spec.on_demand and spec.dest_queue is not None:
                    queue = spec.dest_queue
                    wants = lambda: queue_wants(self.broker, run.vhost, queue)  # noqa: E731
                    watch = partial(self.broker.delivery.settlement.watch, run.vhost, queue)
                await run_link(spec, src, dest, remaining, ledger_made, wants, watch)
            finally:
                with trio.CancelScope(shield=True):
                    await src.aclose()
        finally:
            with trio.CancelScope(shield=True):
                await dest.aclose()

    async def _open(self, endpoint: Endpoint, name: str, what: str) -> Peer:
        if endpoint.host is None:
            host, port = self.local()
            user = endpoint.user if endpoint.user is not None else self.default_user
            password = endpoint.password if endpoint.password is not None else self.default_pass
        else:
            host, port = endpoint.host, endpoint.port
            user, password = endpoint.user or "guest", endpoint.password or ""
        return await open_peer(endpoint, host, port, user, password, name, what)
