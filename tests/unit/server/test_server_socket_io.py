"""The connection's socket fast path (``server/net/socket_io.py``) over real loopback TCP sockets
under trio: whole, ordered writes past the kernel's buffers; a cancelled read that leaves the bytes
for the next one; fairness for a reader that always finds data; end of stream and a reset peer."""

from __future__ import annotations

import socket
import struct

import pytest
import trio
import trio.testing

from headrace.server.net.socket_io import SocketIO, stream_io


async def _pair() -> tuple[trio.SocketStream, trio.SocketStream]:
    """(the broker's end, the client's end) of one loopback TCP connection."""
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    client = await trio.open_tcp_stream("127.0.0.1", port)
    server = await listeners[0].accept()
    await listeners[0].aclose()
    return server, client


async def _connected() -> tuple[SocketIO, trio.SocketStream, trio.SocketStream]:
    """The broker end's fast path, the broker end and the client end of one connection."""
    server, client = await _pair()
    io = stream_io(server)
    assert io is not None
    return io, server, client


async def test_a_plain_tcp_stream_gets_the_fast_path_and_other_streams_do_not() -> None:
    server, client = await _pair()
    assert isinstance(stream_io(server), SocketIO)
    left, _ = trio.testing.memory_stream_pair()
    assert stream_io(left) is None  # TLS and test streams keep their own send_all/receive_some
    await server.aclose()
    await client.aclose()


async def test_a_write_larger_than_the_kernel_buffers_arrives_whole_and_in_order() -> None:
    io, server, client = await _connected()
    payload = bytes(range(256)) * (64 * 1024)  # 16 MiB: the send blocks many times over
    got = bytearray()

    async def read_all() -> None:
        while len(got) < len(payload):
            got.extend(await client.receive_some(65536))
            await trio.sleep(0)  # a slow reader: the broker's side must wait for room, not drop

    async with trio.open_nursery() as nursery:
        nursery.start_soon(read_all)
        await io.send_all(payload)
    assert bytes(got) == payload
    await server.aclose()
    await client.aclose()


async def test_a_read_cancelled_before_it_starts_leaves_the_bytes_for_the_next_read() -> None:
    io, server, client = await _connected()
    await client.send_all(b"close-ok")
    await trio.lowlevel.wait_readable(server.socket)  # the bytes are there to be taken
    with trio.CancelScope() as scope:
        scope.cancel()
        await io.receive_some(1024)
    assert scope.cancelled_caught
    with trio.fail_after(5):  # lost to the cancelled read, it would never come
        assert await io.receive_some(1024) == b"close-ok"
    await server.aclose()
    await client.aclose()


async def test_a_reader_that_always_finds_data_still_lets_other_tasks_run() -> None:
    io, server, client = await _connected()
    await client.send_all(b"x" * 4096)
    await trio.lowlevel.wait_readable(server.socket)
    turns = 0
    done = False

    async def other() -> None:
        nonlocal turns
        while not done:
            turns += 1
            await trio.lowlevel.checkpoint()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(other)
        before = turns
        for _ in range(50):  # every one of these finds data at once: none waits for the socket
            assert await io.receive_some(16) == b"x" * 16
        done = True
    assert turns - before >= 40  # the reader yielded after each read


async def test_the_peer_closing_reads_as_end_of_stream() -> None:
    io, server, client = await _connected()
    await client.send_all(b"last")
    await client.aclose()
    assert await io.receive_some(1024) == b"last"
    assert await io.receive_some(1024) == b""
    await server.aclose()


async def test_a_peer_that_reset_the_connection_is_a_broken_resource() -> None:
    io, server, client = await _connected()
    client.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    await client.aclose()  # linger 0: a reset, not a FIN
    await trio.lowlevel.wait_readable(server.socket)
    with pytest.raises(trio.BrokenResourceError):
        await io.receive_some(1024)
    with pytest.raises(trio.BrokenResourceError):
        for _ in range(3):  # the first write after a reset may still be taken by the kernel
            await io.send_all(b"x" * 1024)
    await server.aclose()
