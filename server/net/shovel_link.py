"""One shovel's connection pair: consume from the source, publish to the destination, settle the
source as the ack mode says.

Owner: ``run_link`` owns the two ``Peer`` objects it opens (their sockets and ``ClientConnection``
state) and the ``Ledger`` of the pair; the shovel's ``ShovelRun`` (``server/net/shovels.py``)
gives it the definition and reads its counters for the status. When either side fails, the link
raises ``LinkError`` and both connections are dropped: the source broker requeues what was
delivered and not acked, so under ``on-confirm`` a message is acked at the source only after the
destination confirmed it, and a failure costs at most a redelivery (at-least-once).
"""

from __future__ import annotations

import ssl
import time
from urllib.parse import quote
from collections.abc import Callable
from dataclasses import dataclass, field

import trio

from headrace.server.amqp import methods as m
from headrace.server.amqp.client import (ChannelClosed, ClientConnection, ClientEvent, Closed, Confirm, Delivery,
                                         Ready, Reply)
from headrace.server.amqp.properties import decode_properties, replace_headers
from headrace.server.broker.node import NODE_NAME
from headrace.server.broker.shovels import Endpoint, FederationHop, Ledger, ShovelSpec, redact, rewrite_properties

__all__ = ["LinkError", "Peer", "Watch", "open_peer", "run_link"]

# ``Settlement.watch`` bound to a queue: registers a wake, returns the call that ends the watch
Watch = Callable[[Callable[[], None]], Callable[[], None]]

OPEN_TIMEOUT = 10.0
READ_SIZE = 1 << 16


class LinkError(Exception):
    """Why a link ended: shown as the shovel's ``reason`` while it waits to reconnect."""


@dataclass(slots=True)
class Peer:
    stream: trio.abc.Stream
    conn: ClientConnection
    lock: trio.Lock
    what: str  # "source" or "destination", for the reason of a failure
    uri: str  # where it connected, without a password (``x-received-from``)
    # what came in the same read as a reply ``call`` waited for (the first deliveries come with
    # basic.consume-ok): ``events`` returns it first
    held: list[ClientEvent] = field(default_factory=list)

    async def flush(self) -> None:
        async with self.lock:  # the other side's task may settle here too: one writer at a time
            data = self.conn.data_to_send()
            if data:
                try:
                    await self.stream.send_all(data)
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                    raise LinkError(f"{self.what}: connection lost ({exc})") from None

    async def events(self) -> list[ClientEvent]:
        if self.held:
            held, self.held = self.held, []
            return held
        try:
            data = await self.stream.receive_some(READ_SIZE)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            raise LinkError(f"{self.what}: connection lost ({exc})") from None
        if not data:
            raise LinkError(f"{self.what}: connection closed by the broker")
        events = self.conn.receive_data(data)
        for event in events:
            if type(event) is Closed:
                raise LinkError(f"{self.what}: {event.reply_code} {event.reply_text}")
        return events

    async def call(self, method: object, reply: type, channel: int = 1) -> object:
        """Send a synchronous method and wait for its reply; a channel closed instead raises."""
        self.conn.send(method, channel)
        await self.flush()
        with trio.move_on_after(OPEN_TIMEOUT) as scope:
            while True:
                events = await self.events()
                await self.flush()  # a channel.close-ok
                for i, event in enumerate(events):
                    if type(event) is Reply and type(event.method) is reply and event.channel == channel:
                        self.held = events[i + 1:]
                        return event.method
                    if type(event) is ChannelClosed and event.channel == channel:
                        raise LinkError(f"{self.what}: {event.reply_code} {event.reply_text}")
        assert scope.cancelled_caught
        raise LinkError(f"{self.what}: no {reply.__name__} within {OPEN_TIMEOUT:.0f} s")

    async def aclose(self) -> None:
        self.conn.close()
        with trio.move_on_after(1):  # a polite close; the socket closes whatever happens
            try:
                await self.flush()
            except LinkError:
                pass
        await trio.aclose_forcefully(self.stream)


async def open_peer(endpoint: Endpoint, host: str, port: int, user: str, password: str, name: str,
                    what: str) -> Peer:
    """Connect, authenticate, open the vhost and channel 1."""
    try:
        with trio.fail_after(OPEN_TIMEOUT):
            stream: trio.abc.Stream = await trio.open_tcp_stream(host, port)
            if endpoint.tls:
                stream = trio.SSLStream(stream, ssl.create_default_context(), server_hostname=host)
            uri = redact(f"amqp{'s' if endpoint.tls else ''}://{user}@{host}:{port}/{quote(endpoint.vhost, safe='')}")
            peer = Peer(stream, ClientConnection(user, password, endpoint.vhost, name=name), trio.Lock(), what, uri)
            try:
                await peer.flush()
                while not peer.conn.open:
                    events = await peer.events()
                    await peer.flush()  # the handshake's next step
                    if any(type(event) is Ready for event in events):
                        break
            except BaseException:
                await trio.aclose_forcefully(stream)
                raise
    except (OSError, trio.TooSlowError) as exc:
        raise LinkError(f"{what}: cannot connect to {host}:{port}: {exc or 'timed out'}") from None
    return peer


async def declare_queue(peer: Peer, name: str, args: dict[str, object]) -> int:
    """The queue's message count. An existing queue is used as it is (probed passively on a channel
    of its own, which a 404 closes); a missing one is declared durable with ``args``."""
    await peer.call(m.ChannelOpen(""), m.ChannelOpenOk, 2)
    try:
        ok = await peer.call(m.QueueDeclare(0, name, passive=True), m.QueueDeclareOk, 2)
        await peer.call(m.ChannelClose(200, "", 0, 0), m.ChannelCloseOk, 2)
    except LinkError:
        ok = await peer.call(m.QueueDeclare(0, name, durable=True, arguments=args), m.QueueDeclareOk)
    assert type(ok) is m.QueueDeclareOk
    return ok.message_count


async def run_link(spec: ShovelSpec, src: Peer, dest: Peer, remaining: Callable[[int], int | None],
                   ledger_made: Callable[[Ledger], None], wants: Callable[[], bool] | None = None,
                   watch: Watch | None = None) -> None:
    """Set both sides up, then forward until the count of ``src-delete-after`` is settled (return)
    or either side fails (``LinkError``). ``remaining(count)`` gets the source queue's message
    count and answers how many messages are left to move (None: no end). ``wants`` (a federated
    queue's link, ``spec.on_demand``): whether the destination queue wants messages now; the
    link consumes only while it does, and looks again when ``watch``'s wake is called (the
    broker's ``Settlement.watch``: after anything that may change the demand)."""
    if spec.ack_mode == "on-confirm":
        await dest.call(m.ConfirmSelect(False), m.ConfirmSelectOk)
    if spec.dest_queue is not None:
        await declare_queue(dest, spec.dest_queue, spec.dest_queue_args)
    await src.call(m.BasicQos(0, spec.prefetch_count, False), m.BasicQosOk)
    count = 0
    if spec.src_queue is not None:
        queue = spec.src_queue
        count = await declare_queue(src, queue, spec.src_queue_args)
    elif spec.federation is not None:  # a durable queue on the upstream, bound with the exchange's keys
        hop = spec.federation
        queue = hop.queue
        # the upstream exchange is declared as the federated one is (RabbitMQ's plugin does too)
        await src.call(m.ExchangeDeclare(0, hop.upstream_exchange, hop.exchange_type, durable=True), m.ExchangeDeclareOk)
        await src.call(m.QueueDeclare(0, queue, durable=True, arguments=dict(spec.src_queue_args)), m.QueueDeclareOk)
        for key, args in hop.bindings:
            await src.call(m.QueueBind(0, queue, hop.upstream_exchange, key, arguments=dict(args)), m.QueueBindOk)
    else:
        ok = await src.call(m.QueueDeclare(0, "", exclusive=True, auto_delete=True), m.QueueDeclareOk)
        assert type(ok) is m.QueueDeclareOk
        queue = ok.queue
        await src.call(m.QueueBind(0, queue, spec.src_exchange or "", spec.src_exchange_key), m.QueueBindOk)
    ledger = Ledger(spec.ack_mode, remaining(count))
    ledger_made(ledger)
    if ledger.done():
        return
    consume = m.BasicConsume(0, queue, "shovel", no_ack=spec.ack_mode == "no-ack", arguments=dict(spec.consumer_args))
    demand = None if wants is None else Demand(consume, wants)
    if demand is None:
        await src.call(consume, m.BasicConsumeOk)
    failure: LinkError | None = None
    unwatch = watch(demand.wake) if demand is not None and watch is not None else None
    try:
        async with trio.open_nursery() as nursery:
            if demand is not None:
                nursery.start_soon(_on_demand, src, demand)
            nursery.start_soon(_forward, spec, src, dest, ledger, nursery.cancel_scope, demand)
            if spec.ack_mode == "on-confirm":
                nursery.start_soon(_confirms, src, dest, ledger, nursery.cancel_scope)
            else:
                nursery.start_soon(_drain, dest)
            nursery.start_soon(_heartbeats, src, dest)
    except* LinkError as group:  # the first side to fail ends the link: the reason is its
        first = group.exceptions[0]
        failure = first if isinstance(first, LinkError) else LinkError(str(first))
    finally:
        if unwatch is not None:
            unwatch()
    if failure is not None:
        raise failure


async def _forward(spec: ShovelSpec, src: Peer, dest: Peer, ledger: Ledger, done: trio.CancelScope,
                   demand: Demand | None) -> None:
    acks: list[tuple[int, bool]] = []
    while True:
        for event in await src.events():
            if type(event) is Delivery:
                if not ledger.wants():
                    continue  # past the count: left unacked, back to the queue when the link closes
                exchange = spec.dest_exchange if spec.dest_exchange is not None else (
                    "" if spec.dest_queue is not None else event.exchange)
                key = spec.dest_queue if spec.dest_queue is not None else (
                    spec.dest_exchange_key if spec.dest_exchange_key is not None else event.routing_key)
                props: bytes | None = event.props_raw
                if spec.federation is not None:
                    props = received_from(spec.federation, event.props_raw, src.uri)
                if props is None:  # made its hops: settled at the upstream, not published
                    if spec.ack_mode != "no-ack":
                        src.conn.send(m.BasicAck(event.delivery_tag, False))
                    continue
                if spec.rewrites:
                    props = rewrite_properties(spec, props, src.uri, dest.uri, time.time())
                dest.conn.publish(exchange, key, props, event.body)
                acks += ledger.published(event.delivery_tag)
            elif type(event) is ChannelClosed:
                raise LinkError(f"source: {event.reply_code} {event.reply_text}")
        await dest.flush()
        for tag, multiple in acks:
            src.conn.send(m.BasicAck(tag, multiple))
        acks.clear()
        if demand is not None:
            demand.steer(src)  # after every batch: a queue that stopped wanting stops the fetch now
        await src.flush()
        if ledger.done():
            done.cancel()


@dataclass(slots=True)
class Demand:
    """A federated queue's link's upstream consumer, started while its queue wants messages and
    cancelled when it stops wanting them (what was delivered meanwhile is still forwarded). The
    replies (consume-ok, cancel-ok) reach ``_forward``, which passes over them. ``wake`` (called
    by the broker when the queue's demand may have changed) sets ``changed``, which
    ``_on_demand`` waits for."""
    consume: m.BasicConsume
    wants: Callable[[], bool]
    consuming: bool = False
    changed: trio.Event = field(default_factory=trio.Event)

    def wake(self) -> None:
        self.changed.set()

    def steer(self, src: Peer) -> bool:
        """Start or cancel the upstream consumer to match the demand; True when a frame was queued."""
        wanted = self.wants()
        if wanted == self.consuming:
            return False
        src.conn.send(self.consume if wanted else m.BasicCancel(self.consume.consumer_tag))
        self.consuming = wanted
        return True


async def _on_demand(src: Peer, demand: Demand) -> None:
    """Looks at the demand whenever the broker says it may have changed: a consumer arriving at
    an idle link (or one gaining credit on an emptied queue) starts it, the last one leaving
    stops it; nothing runs while nothing changes. ``_forward`` also steers after every batch, so
    the fetch stops within one batch of the demand ending."""
    while True:
        demand.changed = trio.Event()  # before looking: a wake while flushing is not lost
        if demand.steer(src):
            await src.flush()
        await demand.changed.wait()


def received_from(hop: FederationHop, props_raw: bytes, uri: str) -> bytes | None:
    """The properties with this hop added to ``x-received-from`` (RabbitMQ's header: a list of
    tables, the latest last), or None when the message already made ``max-hops`` hops."""
    headers = dict(decode_properties(props_raw).headers or {})
    hops = list(headers.get("x-received-from") or [])
    if len(hops) >= hop.max_hops:
        return None
    hops.append({"uri": uri, "exchange": hop.upstream_exchange, "redelivered": False, "cluster-name": NODE_NAME})
    headers["x-received-from"] = hops
    return replace_headers(props_raw, headers)


async def _confirms(src: Peer, dest: Peer, ledger: Ledger, done: trio.CancelScope) -> None:
    while True:
        for event in await dest.events():
            if type(event) is Confirm:
                singles, last = ledger.confirmed(event.delivery_tag, event.multiple, event.ack)
                for tag in singles:
                    src.conn.send(m.BasicAck(tag, False) if event.ack else m.BasicNack(tag, False, True))
                if last is not None:
                    src.conn.send(m.BasicAck(last, True) if event.ack else m.BasicNack(last, True, True))
            elif type(event) is ChannelClosed:
                raise LinkError(f"destination: {event.reply_code} {event.reply_text}")
        await src.flush()
        if ledger.done():
            done.cancel()


async def _drain(dest: Peer) -> None:
    """Without confirms the destination says little, but a close must still end the link."""
    while True:
        for event in await dest.events():
            if type(event) is ChannelClosed:
                raise LinkError(f"destination: {event.reply_code} {event.reply_text}")


async def _heartbeats(src: Peer, dest: Peer) -> None:
    interval = max(1, min(src.conn.heartbeat or 60, dest.conn.heartbeat or 60)) / 2
    while True:
        await trio.sleep(interval)
        for peer in (src, dest):
            if peer.conn.heartbeat and not peer.conn.tick():
                raise LinkError(f"{peer.what}: missed heartbeats")
            await peer.flush()
