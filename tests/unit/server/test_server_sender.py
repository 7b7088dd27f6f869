"""The shared sender (``server/net/sender.py``) writing for parked writer tasks, over real loopback
TCP sockets: what the socket does not take goes to the connection's writer, in order, and replies
that must wait (a durable declare's fsync) still wait."""

from __future__ import annotations

import socket
import struct
from typing import Any

import trio
import trio.testing

from headrace.server.amqp import methods as m
from headrace.server.amqp.codec import encode_method_frame
from headrace.server.config import Settings
from headrace.server.net.amqp_conn import AMQPConnectionHandler
from headrace.server.net.gate import Gate
from headrace.server.net.sender import Sender
from shell_ports import app_hooks
from test_server_amqp_conn import make_broker, opening, publish


class Peer:
    """The client's end: a real socket, read on demand, frames decoded in arrival order."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.buf = b""
        self.frames: list[tuple[int, Any]] = []

    async def read_until(self, done: Any) -> None:
        with trio.fail_after(10):
            while not done():
                data = await self.stream.receive_some(65536)
                assert data, f"the broker hung up after {len(self.frames)} frames"
                self.buf += data
                while len(self.buf) >= 8:
                    ftype, _channel, size = struct.unpack_from(">BHI", self.buf)
                    if len(self.buf) < 8 + size:
                        break
                    payload, self.buf = self.buf[7:7 + size], self.buf[8 + size:]
                    self.frames.append((ftype, m.decode_method(payload) if ftype == 1 else payload))

    def methods(self, kind: type) -> list[Any]:
        return [f for t, f in self.frames if t == 1 and isinstance(f, kind)]

    def bodies(self) -> list[bytes]:
        return [f for t, f in self.frames if t == 3]


async def connect(nursery: trio.Nursery, sender: Sender, **kw: Any) -> tuple[AMQPConnectionHandler, Peer]:
    """A handler on the accepted end of a real TCP connection, with the shared sender."""
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    sock = trio.socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8192)  # before connecting: a small window from the start
    await sock.connect(("127.0.0.1", port))
    client = trio.SocketStream(sock)
    server = await listeners[0].accept()
    await listeners[0].aclose()
    handler = AMQPConnectionHandler(server, kw.pop("broker", None) or make_broker(), Settings(), Gate(),
                                    ("127.0.0.1", 40000), "test", sender=sender, **(app_hooks() | kw))
    nursery.start_soon(handler.run)
    return handler, Peer(client)


async def test_a_full_socket_hands_the_rest_to_the_writer_and_every_frame_arrives_once_in_order() -> None:
    n = 400
    broker = make_broker()
    # The consumer is this connection, whose peer reads nothing: the queue it cannot take from
    # would saturate and hold the publishes (and no clock runs here to find its consumer stalled).
    # What is tested is the sender, so the gate stays out of it.
    broker.delivery.saturation.high = 10 * n
    async with trio.open_nursery() as nursery:
        sender = Sender()
        nursery.start_soon(sender.run)
        handler, peer = await connect(nursery, sender, broker=broker)
        await peer.stream.send_all(opening() + encode_method_frame(1, m.QueueDeclare(queue="q"))
                                   + encode_method_frame(1, m.BasicConsume(queue="q", no_ack=True)))
        await peer.read_until(lambda: peer.methods(m.BasicConsumeOk))
        # 400 x 16 KiB delivered while the peer reads nothing: far more than the socket buffers hold
        for i in range(n):
            await peer.stream.send_all(publish("q", b"%05d" % i + b"x" * 16_000))
        await trio.testing.wait_all_tasks_blocked()
        assert handler.conn.bytes_pending > 0  # the socket is full: output waits with the writer
        await peer.read_until(lambda: len(peer.bodies()) >= n)
        assert [b[:5] for b in peer.bodies()] == [b"%05d" % i for i in range(n)]
        assert [d.delivery_tag for d in peer.methods(m.BasicDeliver)] == list(range(1, n + 1))
        nursery.cancel_scope.cancel()


async def test_a_reply_waiting_for_the_definitions_fsync_is_not_sent_before_it() -> None:
    synced = trio.Event()
    armed = False

    def after_batch() -> int:
        return 1 if armed else 0  # the declare's batch has a durable change waiting for its fsync

    async def definitions_synced(ticket: int) -> None:
        await synced.wait()

    async with trio.open_nursery() as nursery:
        sender = Sender()
        nursery.start_soon(sender.run)
        _handler, peer = await connect(nursery, sender, after_batch=after_batch,
                                       definitions_synced=definitions_synced)
        await peer.stream.send_all(opening())
        await peer.read_until(lambda: peer.methods(m.ChannelOpenOk))
        armed = True
        await peer.stream.send_all(encode_method_frame(1, m.QueueDeclare(queue="d", durable=True)))
        with trio.move_on_after(0.3):
            await peer.read_until(lambda: peer.methods(m.QueueDeclareOk))
        assert not peer.methods(m.QueueDeclareOk)  # held: the writer task waits for the fsync
        synced.set()
        await peer.read_until(lambda: peer.methods(m.QueueDeclareOk))
        assert peer.methods(m.QueueDeclareOk)[0].queue == "d"
        nursery.cancel_scope.cancel()


async def test_a_reader_writes_what_its_batch_queued_for_other_connections_at_its_end() -> None:
    """No sender task runs here: a publisher's read alone gets the delivery to the consumer's socket
    (and each handshake reply to its own), written by the reader at the end of its batch."""
    broker = make_broker()
    async with trio.open_nursery() as nursery:
        sender = Sender()  # never run: only readers' batch ends can write
        _consumer, consumer = await connect(nursery, sender, broker=broker)
        _publisher, publisher = await connect(nursery, sender, broker=broker)
        await consumer.stream.send_all(opening() + encode_method_frame(1, m.QueueDeclare(queue="q"))
                                       + encode_method_frame(1, m.BasicConsume(queue="q", no_ack=True)))
        await consumer.read_until(lambda: consumer.methods(m.BasicConsumeOk))
        await publisher.stream.send_all(opening() + encode_method_frame(1, m.ConfirmSelect()) + publish("q", b"hi"))
        await publisher.read_until(lambda: publisher.methods(m.BasicAck))  # transient: confirmed at once
        await consumer.read_until(lambda: consumer.bodies())
        assert consumer.bodies() == [b"hi"] and len(consumer.methods(m.BasicDeliver)) == 1
        nursery.cancel_scope.cancel()
