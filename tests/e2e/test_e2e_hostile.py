"""Hostile clients: slowloris on AMQP and HTTP, connection floods, a consumer that never reads."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from pathlib import Path

import pika
import pika.exceptions
import pytest

pytestmark = pytest.mark.timeout(120)

CLIENT_CONNECTS = 40


def close_quietly(conn: pika.BlockingConnection) -> None:
    """The stuck consumer's close races the broker dropping it when the test ends."""
    try:
        conn.close()
    except pika.exceptions.AMQPError:
        pass


def closed_within(sock: socket.socket, seconds: float) -> bool:
    sock.settimeout(seconds)
    try:
        while sock.recv(4096):
            pass
        return True
    except socket.timeout:
        return False


def test_slowloris_amqp_and_http_are_dropped(broker_factory):
    proc = broker_factory(env={"HEADRACE_HANDSHAKE_TIMEOUT": "1", "HEADRACE_HTTP_REQUEST_TIMEOUT": "1"})
    amqp = socket.create_connection(("127.0.0.1", proc.amqp_port))
    amqp.sendall(b"AMQP")  # and then nothing
    http = socket.create_connection(("127.0.0.1", proc.http_port))
    http.sendall(b"GET /api/overview HTTP/1.1\r\nHost: x\r\n")  # headers never finished
    assert closed_within(amqp, 10) and closed_within(http, 10)
    conn = pika.BlockingConnection(pika.URLParameters(proc.url))  # others still get in
    assert conn.is_open
    conn.close()


def test_connection_limits(broker_factory):
    # timeouts far beyond the test's waits: a socket closed within them was evicted
    proc = broker_factory(env={"HEADRACE_MAX_CONNECTIONS": "3", "HEADRACE_MAX_UNAUTHENTICATED": "2",
                               "HEADRACE_HEADER_TIMEOUT": "60", "HEADRACE_HANDSHAKE_TIMEOUT": "60"})
    conns = [pika.BlockingConnection(pika.URLParameters(proc.url)) for _ in range(3)]
    with pytest.raises(pika.exceptions.AMQPConnectionError) as info:
        pika.BlockingConnection(pika.URLParameters(proc.url))
    assert "530" in repr(info.value) or "NOT_ALLOWED" in repr(info.value)
    for c in conns:
        c.close()

    def connect() -> socket.socket:
        return socket.create_connection(("127.0.0.1", proc.amqp_port))

    def send_header(sock: socket.socket) -> None:
        sock.sendall(b"AMQP\x00\x00\x09\x01")
        assert sock.recv(7)  # connection.start: the broker has seen the header

    # at the bound on handshakes in progress a new socket gets in and the one stuck longest (since it
    # connected, or since it sent its header) makes room
    silent = connect()
    pika.BlockingConnection(pika.URLParameters(proc.url)).close()  # the broker has taken silent in by now
    early = connect()
    send_header(early)  # early's last step is after silent's: silent is stuck longest
    extra = connect()
    assert closed_within(silent, 5) and not closed_within(early, 0.3)
    conn = pika.BlockingConnection(pika.URLParameters(proc.url))
    assert conn.is_open and closed_within(early, 5) and not closed_within(extra, 0.3)
    conn.close()
    for sock in (early, silent, extra):
        sock.close()


def test_real_clients_get_in_through_600_idle_sockets_and_a_slowloris(broker_factory):
    proc = broker_factory()  # default bounds: 512 unauthenticated, header within 3 s
    flood = subprocess.Popen([sys.executable, str(Path(__file__).parent / "slowloris.py"), str(proc.amqp_port), "600"],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert flood.stdout is not None and flood.stdout.readline().strip() == "ready"
        params = pika.URLParameters(proc.url + "?connection_attempts=1&socket_timeout=5")
        params.blocked_connection_timeout = 5
        ok = 0
        for _ in range(CLIENT_CONNECTS):
            try:
                with pika.BlockingConnection(params) as conn:
                    conn.channel().queue_declare("", exclusive=True)
                ok += 1
            except pika.exceptions.AMQPError:
                pass
    finally:
        flood.terminate()
        out, _ = flood.communicate(timeout=10)
    evicted = int(out.split()[-1])
    assert evicted > 0  # the flood did fill the bound, and kept reopening what the broker closed
    assert ok >= 0.95 * CLIENT_CONNECTS, f"{ok} of {CLIENT_CONNECTS} connects got in ({evicted} flood sockets closed)"


def test_consumer_that_never_reads_keeps_memory_bounded(broker_factory):
    proc = broker_factory(env={"HEADRACE_QUEUE_MAX_RESIDENT_BYTES": str(8 << 20)})
    stuck = pika.BlockingConnection(pika.URLParameters(proc.url))
    sch = stuck.channel()
    sch.queue_declare("flood")
    sch.queue_declare("healthy")
    sch.basic_consume("flood", lambda *a: None, auto_ack=True)  # then never reads its socket again
    baseline = proc.rss()
    publisher = pika.BlockingConnection(pika.URLParameters(proc.url))
    pch = publisher.channel()
    body = b"x" * 10_000
    impl = pch._impl
    for i in range(15_000):  # 150 MB for the stuck consumer
        impl.basic_publish("", "flood", body)
        if i % 200 == 199:
            publisher.process_data_events(0)
    pch.confirm_delivery()  # select-ok comes back only after every earlier publish was handled
    pch.basic_publish("", "healthy", b"still flowing")
    other = pika.BlockingConnection(pika.URLParameters(proc.url))
    assert other.channel().basic_get("healthy", auto_ack=True)[2] == b"still flowing"
    grown = proc.rss() - baseline
    assert grown < 80 * 2**20, f"broker grew by {grown >> 20} MiB"
    other.close()
    publisher.close()
    threading.Thread(target=close_quietly, args=(stuck,), daemon=True).start()
