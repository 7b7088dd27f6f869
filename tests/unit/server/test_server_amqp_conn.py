"""One AMQP connection's tasks (``server/net/amqp_conn.py``: reader, writer, heartbeat) over an
in-memory socket (``trio.testing.memory_stream_pair``) under trio's mock clock
(``autojump_clock``: MockClock(autojump_threshold=0), so virtual time jumps to the next deadline
as soon as every task waits and nothing really sleeps). The broker, session and protocol are the
real ones; the test is the client: it writes AMQP bytes and a reader task logs every frame the
broker sends, with the virtual time it arrived, and when the broker hung up."""

from __future__ import annotations

import struct
from typing import Any

import trio
import trio.testing

from headrace.server.amqp import methods as m
from headrace.server.amqp.codec import encode_frame, encode_method_frame
from headrace.server.amqp.spec import ReplyCode
from headrace.server.broker import Broker
from headrace.server.config import Settings
from headrace.server.net.amqp_conn import CLOSE_TIMEOUT, AMQPConnectionHandler
from headrace.server.net.gate import Gate
from headrace.server.session import Lifecycle
from shell_ports import app_hooks, shell_ports

HEADER = b"AMQP\x00\x00\x09\x01"
HEARTBEAT = b"\x08\x00\x00\x00\x00\x00\x00\xce"


def opening(heartbeat: int = 0, client_properties: dict[str, Any] | None = None) -> bytes:
    """What a client sends from the protocol header to channel 1 open, pipelined in one write."""
    return (HEADER
            + encode_method_frame(0, m.ConnectionStartOk(client_properties or {}, "PLAIN", b"\x00guest\x00guest",
                                                         "en_US"))
            + encode_method_frame(0, m.ConnectionTuneOk(0, 131072, heartbeat))
            + encode_method_frame(0, m.ConnectionOpen("/"))
            + encode_method_frame(1, m.ChannelOpen()))


def publish(routing_key: str, body: bytes = b"m") -> bytes:
    header = struct.pack(">HHQ", 60, 0, len(body)) + b"\x00\x00"
    return (encode_method_frame(1, m.BasicPublish(exchange="", routing_key=routing_key))
            + encode_frame(2, 1, header) + encode_frame(3, 1, body))


class Client:
    """The peer's end of the socket."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.frames: list[tuple[float, int, Any]] = []  # (arrival time, frame type, method or payload)
        self.eof_at: float | None = None

    async def send(self, data: bytes) -> None:
        await self.stream.send_all(data)

    async def read(self) -> None:
        buf = b""
        while True:
            try:
                data = await self.stream.receive_some()
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                data = b""
            if not data:
                self.eof_at = trio.current_time()
                return
            buf += data
            while len(buf) >= 8:
                ftype, _channel, size = struct.unpack_from(">BHI", buf)
                if len(buf) < 8 + size:
                    break
                payload, buf = buf[7:7 + size], buf[8 + size:]
                self.frames.append((trio.current_time(), ftype, m.decode_method(payload) if ftype == 1 else payload))

    def methods(self, kind: type | None = None) -> list[Any]:
        return [f for _, t, f in self.frames if t == 1 and (kind is None or isinstance(f, kind))]

    def heartbeats(self) -> list[float]:
        return [at for at, t, _ in self.frames if t == 8]


class Running:
    def __init__(self, handler: AMQPConnectionHandler, client: Client, gate: Gate) -> None:
        self.handler = handler
        self.client = client
        self.gate = gate
        self.done_at: float | None = None  # when ``run`` returned (socket closed)

    @property
    def session(self) -> Any:
        return self.handler.session

    async def run(self) -> None:
        await self.handler.run()
        self.done_at = trio.current_time()


def make_broker() -> Broker:
    broker = Broker(ports=shell_ports())
    broker.ensure_default("/", "guest", "guest")
    return broker


async def start(nursery: trio.Nursery, broker: Broker | None = None, *,
                on_first_hold: Any = None, grow: Any = None, **settings: Any) -> Running:
    client_stream, server_stream = trio.testing.memory_stream_pair()
    gate = Gate()
    handler = AMQPConnectionHandler(server_stream, broker or make_broker(), Settings(**settings), gate,
                                    ("127.0.0.1", 40000), "test", grow=grow,
                                    **app_hooks(**({"on_first_hold": on_first_hold} if on_first_hold else {})))
    running = Running(handler, Client(client_stream), gate)
    nursery.start_soon(running.run)
    nursery.start_soon(running.client.read)
    await trio.testing.wait_all_tasks_blocked()
    return running


# ------------------------------------------------------------------ heartbeats


async def test_a_silent_peer_is_dropped_after_two_heartbeat_intervals_and_not_before(autojump_clock):
    h = 4
    async with trio.open_nursery() as nursery:
        conn = await start(nursery)
        await conn.client.send(opening(heartbeat=h))
        last_sent = trio.current_time()
        await trio.sleep(2 * h)  # two whole intervals of silence: still within the spec's limit
        assert conn.session.state is Lifecycle.OPEN and conn.done_at is None
        await trio.sleep(2 * h)
    # silence is measured on the heartbeat task's h/2 grid, which starts at connection.open-ok:
    # the drop comes after more than 2 intervals, and within 3
    assert conn.done_at is not None and conn.client.eof_at == conn.done_at
    assert 2 * h < conn.done_at - last_sent <= 3 * h
    assert conn.session.state is Lifecycle.CLOSED and conn.session.id not in conn.handler.broker.connections


async def test_a_peer_sending_heartbeats_stays_and_is_dropped_once_it_stops(autojump_clock):
    h = 4
    async with trio.open_nursery() as nursery:
        conn = await start(nursery)
        await conn.client.send(opening(heartbeat=h))
        for _ in range(25):  # 100 s, a heartbeat every interval as amqplib sends them
            await trio.sleep(h)
            await conn.client.send(HEARTBEAT)
        last_sent = trio.current_time()
        assert conn.session.state is Lifecycle.OPEN and conn.done_at is None
        await trio.sleep(4 * h)
    assert conn.done_at is not None and 2 * h < conn.done_at - last_sent <= 3 * h


async def test_an_idle_broker_sends_a_heartbeat_every_interval(autojump_clock):
    h = 6
    async with trio.open_nursery() as nursery:
        conn = await start(nursery)
        await conn.client.send(opening(heartbeat=h))
        for _ in range(10):
            await trio.sleep(h)
            await conn.client.send(HEARTBEAT)
        beats = conn.client.heartbeats()
        nursery.cancel_scope.cancel()
    assert len(beats) >= 8
    assert all(later - earlier == h for earlier, later in zip(beats, beats[1:]))


async def test_a_busy_broker_sends_no_heartbeat(autojump_clock):
    h = 4
    broker = make_broker()
    broker.vhosts["/"].declare_queue("q", owner=None, now=0.0)
    async with trio.open_nursery() as nursery:
        conn = await start(nursery, broker)
        await conn.client.send(opening(heartbeat=h) + encode_method_frame(1, m.BasicConsume(queue="q", no_ack=True)))
        for _ in range(40):  # a delivery every h/4: the broker's own traffic shows it is alive
            await trio.sleep(h / 4)
            broker.delivery.publish(broker.vhosts["/"], "", "q", b"\x00\x00", b"m", 0.0)
            await conn.client.send(HEARTBEAT)
        await trio.testing.wait_all_tasks_blocked()
        nursery.cancel_scope.cancel()
    assert len(conn.client.methods(m.BasicDeliver)) == 40
    assert conn.client.heartbeats() == []


async def test_heartbeat_zero_means_silence_is_never_a_reason_to_close(autojump_clock):
    async with trio.open_nursery() as nursery:
        conn = await start(nursery)
        await conn.client.send(opening(heartbeat=0))
        await trio.sleep(3600)
        assert conn.session.state is Lifecycle.OPEN and conn.done_at is None
        assert conn.client.heartbeats() == []
        nursery.cancel_scope.cancel()


async def test_a_peer_paused_by_the_broker_is_not_dropped_for_silence(autojump_clock):
    """While the broker does not read a publisher (an alarm), its heartbeats wait in the socket."""
    h = 4
    broker = make_broker()
    broker.vhosts["/"].declare_queue("q", owner=None, now=0.0)
    async with trio.open_nursery() as nursery:
        conn = await start(nursery, broker)
        await conn.client.send(opening(heartbeat=h) + publish("q"))
        await trio.sleep(1)
        broker.set_alarm("memory", True)
        await conn.client.send(publish("q"))  # read (the reader was waiting), then it pauses
        await trio.sleep(10 * h)
        assert conn.session.read_paused and conn.session.state is Lifecycle.OPEN and conn.done_at is None
        nursery.cancel_scope.cancel()


# ------------------------------------------------------------------ the read gate


async def test_gate_releases_every_waiter_of_one_change_and_only_those():
    gate = Gate()
    woken: list[str] = []

    async def waiter(name: str) -> None:
        await gate.wait_changed()
        woken.append(name)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter, "a")
        nursery.start_soon(waiter, "b")
        await trio.testing.wait_all_tasks_blocked()
        assert woken == []
        gate.notify()
        await trio.testing.wait_all_tasks_blocked()
        assert sorted(woken) == ["a", "b"]
        nursery.start_soon(waiter, "c")  # waits for the next change, not the one before it
        await trio.testing.wait_all_tasks_blocked()
        assert sorted(woken) == ["a", "b"]
        gate.notify()
    assert sorted(woken) == ["a", "b", "c"]


async def test_an_alarm_holds_a_publishers_reads_until_the_gate_says_it_cleared(autojump_clock):
    broker = make_broker()
    queue = broker.vhosts["/"].declare_queue("q", owner=None, now=0.0)
    async with trio.open_nursery() as nursery:
        conn = await start(nursery, broker)
        await conn.client.send(opening() + publish("q"))
        await trio.testing.wait_all_tasks_blocked()
        assert queue.messages_ready == 1
        broker.set_alarm("disk", True)
        await conn.client.send(publish("q"))  # the read under way when the alarm came is applied
        await trio.testing.wait_all_tasks_blocked()
        assert queue.messages_ready == 2 and conn.session.read_paused
        await conn.client.send(publish("q") + publish("q"))
        await trio.sleep(60)
        assert queue.messages_ready == 2  # held in the socket, not read
        gate_changed_without_clearing = conn.gate
        gate_changed_without_clearing.notify()  # a change that leaves the alarm up: looks, holds on
        await trio.sleep(1)
        assert queue.messages_ready == 2
        broker.set_alarm("disk", False)
        await trio.sleep(60)
        assert queue.messages_ready == 2  # nobody told the gate yet
        conn.gate.notify()
        await trio.testing.wait_all_tasks_blocked()
        assert queue.messages_ready == 4 and not conn.session.read_paused
        nursery.cancel_scope.cancel()


async def test_the_first_saturation_hold_calls_on_first_hold_once_and_an_alarm_hold_does_not(autojump_clock):
    """What app.py uses to shrink a publisher's receive window (``socket_bounds.HELD_RCVBUF``): it
    runs when a saturated queue first holds the connection, never for an alarm, and only once."""
    broker = make_broker()
    broker.vhosts["/"].declare_queue("q", owner=None, now=0.0)
    holds: list[float] = []
    async with trio.open_nursery() as nursery:
        conn = await start(nursery, broker, on_first_hold=lambda: holds.append(trio.current_time()))
        await conn.client.send(opening() + publish("q"))
        await trio.testing.wait_all_tasks_blocked()
        broker.set_alarm("memory", True)
        await conn.client.send(publish("q"))
        await trio.testing.wait_all_tasks_blocked()
        assert conn.session.read_paused and holds == []  # held by the alarm: the window stays
        broker.set_alarm("memory", False)
        conn.gate.notify()
        await trio.testing.wait_all_tasks_blocked()
        # a consumer that takes one message and never acks, then more publishes than the bound
        await conn.client.send(encode_method_frame(1, m.BasicQos(0, 1, False))
                               + encode_method_frame(1, m.BasicConsume(queue="q"))
                               + publish("q") * (broker.delivery.saturation.high + 100))
        await trio.testing.wait_all_tasks_blocked()
        assert conn.session.read_paused and len(holds) == 1
        conn.gate.notify()  # looks again, still saturated: held on, nothing more
        await trio.sleep(1)
        assert conn.session.read_paused and len(holds) == 1
        nursery.cancel_scope.cancel()


async def test_the_window_is_told_each_read_until_it_is_done_or_a_saturated_queue_holds(autojump_clock):
    """What app.py uses to grow a receive window (socket_bounds.Window): told the bytes of every
    read of the open connection with its publishes so far; dropped for good once it says it is
    done, or once a saturated queue held the connection (an alarm hold does not count)."""
    broker = make_broker()
    queue = broker.vhosts["/"].declare_queue("q", owner=None, now=0.0)
    reads: list[int] = []
    counts: list[int] = []
    done = False

    def grow(nbytes: int, published: int) -> bool:
        reads.append(nbytes)
        counts.append(published)
        return not done

    async with trio.open_nursery() as nursery:
        conn = await start(nursery, broker, grow=grow)
        await conn.client.send(opening())
        await trio.testing.wait_all_tasks_blocked()
        assert reads == []  # the handshake is not counted
        one = publish("q")
        await conn.client.send(one * 3)
        await trio.testing.wait_all_tasks_blocked()
        assert reads == [3 * len(one)] and counts == [3]  # the connection's publishes so far
        broker.set_alarm("memory", True)
        await conn.client.send(one)
        await trio.testing.wait_all_tasks_blocked()
        broker.set_alarm("memory", False)
        conn.gate.notify()
        await trio.testing.wait_all_tasks_blocked()
        assert conn.handler.grow is not None and len(reads) == 2
        # a consumer that takes one message and never acks, then more publishes than the bound
        await conn.client.send(encode_method_frame(1, m.BasicQos(0, 1, False))
                               + encode_method_frame(1, m.BasicConsume(queue="q"))
                               + one * (broker.delivery.saturation.high + 100))
        await trio.testing.wait_all_tasks_blocked()
        assert conn.session.read_paused and conn.handler.grow is None
        assert len(reads) == 2  # the batch that saturated the queue did not grow the window
        assert queue.messages_ready > broker.delivery.saturation.high
        nursery.cancel_scope.cancel()

    reads.clear()
    done = True
    async with trio.open_nursery() as nursery:
        conn = await start(nursery, make_broker(), grow=grow)
        await conn.client.send(opening())
        await trio.testing.wait_all_tasks_blocked()
        await conn.client.send(publish("q"))
        await trio.testing.wait_all_tasks_blocked()
        await conn.client.send(publish("q"))
        await trio.testing.wait_all_tasks_blocked()
        assert len(reads) == 1 and conn.handler.grow is None  # it said it was done: asked no more
        nursery.cancel_scope.cancel()


# ------------------------------------------------------------------ the writer


async def test_one_batch_of_work_goes_out_in_one_send(autojump_clock):
    broker = make_broker()
    broker.vhosts["/"].declare_queue("q", owner=None, now=0.0)
    async with trio.open_nursery() as nursery:
        conn = await start(nursery, broker)
        await conn.client.send(opening())
        await trio.testing.wait_all_tasks_blocked()
        io = conn.session.io
        reads, sends, before = io.recv_cnt, io.send_cnt, len(conn.client.methods())
        await conn.client.send(encode_method_frame(1, m.ConfirmSelect()) + b"".join(publish("q") for _ in range(100)))
        await trio.testing.wait_all_tasks_blocked()
        assert io.recv_cnt == reads + 1  # the client's one write was read in one go
        assert io.send_cnt == sends + 1  # select-ok and 100 acks: one send_all
        methods = conn.client.methods()[before:]
        assert isinstance(methods[0], m.ConfirmSelectOk)
        acks = methods[1:]
        assert all(isinstance(a, m.BasicAck) for a in acks) and acks[-1].delivery_tag == 100
        assert len(acks) == 1 and acks[0].multiple  # the batch's confirms, as one multiple ack
        nursery.cancel_scope.cancel()


async def test_a_consumer_stops_at_the_high_water_mark_and_resumes_when_the_writer_drained(autojump_clock):
    """The socket is a lockstep pair: the writer's send_all waits until the client reads."""
    broker = make_broker()
    vhost = broker.vhosts["/"]
    vhost.declare_queue("q", owner=None, now=0.0)
    body = b"x" * 100_000
    for _ in range(40):  # 4 MB ready, four times the outgoing buffer's bound
        broker.delivery.publish(vhost, "", "q", b"\x00\x00", body, 0.0)
    client_stream, server_stream = trio.testing.lockstep_stream_pair()
    handler = AMQPConnectionHandler(server_stream, broker, Settings(), Gate(), ("127.0.0.1", 40000), "test",
                                    **app_hooks())
    async with trio.open_nursery() as nursery:
        nursery.start_soon(handler.run)
        await client_stream.send_all(opening() + encode_method_frame(1, m.BasicConsume(queue="q", no_ack=True)))
        await trio.testing.wait_all_tasks_blocked()
        queue = vhost.queues["q"]
        taken = 40 - queue.messages_ready
        assert 0 < taken < 20  # about 1 MiB encoded, then the consumer waits for the writer
        assert handler.conn.bytes_pending == 0  # all of it handed to the writer, blocked in send_all
        received = 0
        while received < 40 * len(body):
            data = await client_stream.receive_some()
            received += data.count(b"x")
        await trio.testing.wait_all_tasks_blocked()
        assert queue.messages_ready == 0
        nursery.cancel_scope.cancel()


# ------------------------------------------------------------------ lifecycle


async def test_client_close_is_answered_and_the_socket_goes_when_the_peer_hangs_up(autojump_clock):
    async with trio.open_nursery() as nursery:
        conn = await start(nursery)
        await conn.client.send(opening())
        await trio.testing.wait_all_tasks_blocked()
        assert conn.session.state is Lifecycle.OPEN
        await conn.client.send(encode_method_frame(0, m.ConnectionClose(200, "bye", 0, 0)))
        await trio.testing.wait_all_tasks_blocked()
        assert conn.session.state is Lifecycle.CLOSED
        assert isinstance(conn.client.methods()[-1], m.ConnectionCloseOk)
        assert conn.done_at is None  # the peer closes first: we wait for it (up to CLOSE_TIMEOUT)
        t = trio.current_time()
        await conn.client.stream.aclose()
    assert conn.done_at == t


async def test_client_close_then_silence_the_socket_goes_after_close_timeout(autojump_clock):
    async with trio.open_nursery() as nursery:
        conn = await start(nursery)
        await conn.client.send(opening())
        await trio.sleep(1)
        await conn.client.send(encode_method_frame(0, m.ConnectionClose(200, "bye", 0, 0)))
        t = trio.current_time()
    assert conn.session.state is Lifecycle.CLOSED and conn.done_at == t + CLOSE_TIMEOUT
    assert conn.client.eof_at == conn.done_at


async def test_server_close_waits_for_close_ok_then_ends(autojump_clock):
    async with trio.open_nursery() as nursery:
        conn = await start(nursery)
        await conn.client.send(opening())
        await trio.testing.wait_all_tasks_blocked()
        conn.handler.force_close(ReplyCode.CONNECTION_FORCED, "CONNECTION_FORCED - shutdown")
        await trio.sleep(1)
        close = conn.client.methods()[-1]
        assert isinstance(close, m.ConnectionClose) and close.reply_code == 320
        assert conn.session.state is Lifecycle.CLOSING and conn.done_at is None
        assert conn.session.id not in conn.handler.broker.connections  # dropped on leaving OPEN
        await conn.client.send(encode_method_frame(1, m.BasicPublish(exchange="", routing_key="q")))  # discarded
        await conn.client.send(encode_method_frame(0, m.ConnectionCloseOk()))
        t = trio.current_time()
    assert conn.session.state is Lifecycle.CLOSED and conn.done_at == t


async def test_server_close_unanswered_ends_after_close_timeout(autojump_clock):
    async with trio.open_nursery() as nursery:
        conn = await start(nursery)
        await conn.client.send(opening())
        await trio.testing.wait_all_tasks_blocked()
        t = trio.current_time()
        conn.handler.force_close(ReplyCode.CONNECTION_FORCED, "CONNECTION_FORCED - shutdown")
    assert conn.done_at == t + CLOSE_TIMEOUT and conn.session.state is Lifecycle.CLOSED
    assert conn.handler.broker.counters.extra["connection_closed"] == 1  # its state dropped once


async def test_a_socket_that_never_sends_the_header_goes_at_the_header_timeout(autojump_clock):
    async with trio.open_nursery() as nursery:
        conn = await start(nursery, header_timeout=3.0)
        t = trio.current_time()
    assert conn.done_at == t + 3.0 and conn.client.frames == []


async def test_a_handshake_that_stalls_is_closed_at_the_handshake_timeout(autojump_clock):
    async with trio.open_nursery() as nursery:
        conn = await start(nursery, handshake_timeout=10.0)
        t = trio.current_time()
        await conn.client.send(HEADER)  # then nothing: connection.start unanswered
        await trio.sleep(9.9)
        assert conn.session.state is Lifecycle.HANDSHAKE and conn.done_at is None
    close = conn.client.methods()[-1]
    assert isinstance(close, m.ConnectionClose) and close.reply_code == 320
    assert "handshake timeout" in close.reply_text
    assert conn.done_at == t + 10.0 and conn.session.state is not Lifecycle.OPEN


async def test_a_paused_publisher_closed_by_the_management_api_goes_after_close_timeout(autojump_clock):
    broker = make_broker()
    broker.vhosts["/"].declare_queue("q", owner=None, now=0.0)
    async with trio.open_nursery() as nursery:
        conn = await start(nursery, broker)
        await conn.client.send(opening() + publish("q"))
        await trio.sleep(1)
        broker.set_alarm("memory", True)
        await conn.client.send(publish("q"))
        await trio.sleep(1)
        assert conn.session.read_paused  # the reader waits on the gate, which nobody notifies
        t = trio.current_time()
        conn.session.close_by_admin("Closed via management plugin")
    close = conn.client.methods(m.ConnectionClose)[-1]
    assert close.reply_code == 320 and "Closed via management plugin" in close.reply_text
    assert conn.done_at == t + CLOSE_TIMEOUT and conn.session.state is Lifecycle.CLOSED



async def test_output_pending_is_counted_while_queued_and_forgotten_once_sent(autojump_clock):
    """The memory alarm's sample reads the handlers in ``pending_output`` instead of walking every
    connection: a handler is there while output waits behind a blocked writer, gone once sent."""
    from headrace.server.net.alarms import held_memory

    broker = make_broker()
    vhost = broker.vhosts["/"]
    vhost.declare_queue("q", owner=None, now=0.0)
    for _ in range(20):
        broker.delivery.publish(vhost, "", "q", b"\x00\x00", b"x" * 100_000, 0.0)
    pending: dict[Any, None] = {}
    client_stream, server_stream = trio.testing.lockstep_stream_pair()
    handler = AMQPConnectionHandler(server_stream, broker, Settings(), Gate(), ("127.0.0.1", 40000), "test",
                                    pending_output=pending, **app_hooks())
    async with trio.open_nursery() as nursery:
        nursery.start_soon(handler.run)
        await client_stream.send_all(opening() + encode_method_frame(1, m.BasicConsume(queue="q", no_ack=True)))
        await trio.testing.wait_all_tasks_blocked()
        # the writer is blocked in send_all with what it took; a reply queued now waits behind it
        await client_stream.send_all(encode_method_frame(2, m.ChannelOpen()))
        await trio.testing.wait_all_tasks_blocked()
        queued = handler.conn.bytes_pending
        assert queued > 0 and handler in pending
        assert held_memory(broker, pending) - held_memory(broker) == queued
        received = 0
        while received < 20 * 100_000:
            data = await client_stream.receive_some()
            received += data.count(b"x")
        with trio.move_on_after(5):  # virtual time: a handler left behind fails below, not hangs
            while True:
                await trio.testing.wait_all_tasks_blocked()
                if not handler.conn.bytes_pending and handler not in pending:
                    break
                await client_stream.receive_some()
        assert handler not in pending
        assert vhost.queues["q"].messages_ready == 0
        assert broker.open_channels == 2
        nursery.cancel_scope.cancel()
    assert handler not in pending
