"""Helpers shared by the end-to-end tests (imported by module name: pytest puts this folder on the path)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pika
from celery import Celery
from headrace.server.amqp import methods as m
from headrace.server.amqp.codec import encode_method_frame


# a module's BROKER_ENV for rate history at 1-s samples (RabbitMQ's default is 5 s), and the query
# parameters that ask for the last half minute of it, as RabbitMQ's UI asks
FAST_STATS = {"HEADRACE_STATS_RETENTION_GLOBAL": "[[60, 1], [600, 10]]",
              "HEADRACE_STATS_RETENTION_BASIC": "[[60, 1], [600, 10]]"}
HISTORY = {f"{prefix}_{part}": value for prefix in ("lengths", "msg_rates", "data_rates", "node_stats")
           for part, value in (("age", 30), ("incr", 1))}


def rose(get: Callable[[], dict], timeout: float = 5.0) -> bool:
    """The ``*_details`` ``get`` reads (with ``HISTORY`` asked) rose over the last half minute: its
    ``avg_rate`` is positive once a sample after the traffic is taken."""
    return wait_until(lambda: get().get("avg_rate", 0) > 0, timeout=timeout)


def unique(prefix: str) -> str:
    """A name no other test uses, so tests can share one broker per module."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def wait_until(cond: Callable[[], bool], conn: pika.BlockingConnection | None = None, timeout: float = 5.0) -> bool:
    """Until ``cond`` holds, for at most ``timeout`` seconds: process the connection's events between
    checks, or (without a connection, e.g. polling the HTTP API) pause 20 ms between them."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        if conn is not None:
            conn.process_data_events(time_limit=0.05)
        else:
            time.sleep(0.02)
    return True


@contextlib.contextmanager
def celery_worker(amqp_url: str, queue: str, cwd: Path) -> Iterator[Celery]:
    """A real ``celery worker --pool=solo`` subprocess on ``queue`` (tests/e2e/celery_tasks.py), and a
    client app of its own for the test: a module-level app would keep its pooled connections to the
    broker of an earlier test module. The worker is stopped by PID (warm shutdown) and must exit 0."""
    url = amqp_url.replace("amqp://", "pyamqp://")
    env = {**os.environ, "E2E_BROKER_URL": url, "E2E_QUEUE": queue, "PYTHONPATH": str(Path(__file__).parent)}
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "celery_tasks", "worker", "--pool=solo", "--concurrency=1",
         "--loglevel=WARNING", "--without-gossip", "--without-mingle", "--without-heartbeat"],
        env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    client = Celery("headrace_e2e_client", broker=url, backend="rpc://")
    client.conf.update(task_default_queue=queue, broker_connection_retry_on_startup=True, result_expires=60)
    try:
        yield client
    finally:
        client.close()
        worker.send_signal(signal.SIGTERM)
        try:
            out, _ = worker.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            worker.kill()
            out, _ = worker.communicate()
    assert worker.returncode == 0, out


def recv_until_closed(sock: socket.socket, timeout: float = 10) -> bytes:
    sock.settimeout(timeout)
    data = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            return data
        data += chunk


def raw_open(port: int, heartbeat: int = 0, user: str = "guest", password: str = "guest") -> socket.socket:
    """A hand-driven client: header, start-ok, tune-ok, open; returns the socket after open-ok."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(b"AMQP\x00\x00\x09\x01")
    sock.recv(65536)  # connection.start
    response = b"\x00" + user.encode() + b"\x00" + password.encode()
    sock.sendall(encode_method_frame(0, m.ConnectionStartOk({}, "PLAIN", response, "en_US")))
    sock.recv(65536)  # tune
    sock.sendall(encode_method_frame(0, m.ConnectionTuneOk(2047, 131072, heartbeat)))
    sock.sendall(encode_method_frame(0, m.ConnectionOpen("/")))
    sock.recv(65536)  # open-ok
    return sock


def connection_close_of(sock: socket.socket) -> tuple[int, str]:
    """(reply code, reply text) of the server's connection.close on a hand-driven socket; answers
    close-ok and waits for the server to hang up."""
    marker = b"\x00\x0a\x00\x32"  # connection.close
    sock.settimeout(10)
    data = b""
    while marker not in data or len(data) < data.find(marker) + 7 or \
            len(data) < data.find(marker) + 7 + data[data.find(marker) + 6]:
        chunk = sock.recv(65536)
        assert chunk, data
        data += chunk
    i = data.find(marker)
    code, size = struct.unpack_from(">HB", data, i + 4)
    sock.sendall(encode_method_frame(0, m.ConnectionCloseOk()))
    recv_until_closed(sock)
    return code, data[i + 7:i + 7 + size].decode()


def publish_persistent(url: str, queue: str, prefix: str, count: int, body: Callable[[str], bytes]) -> list[str]:
    """``count`` persistent messages on the durable ``queue``, ids ``prefix-<i>`` and bodies
    ``body(id)``, each confirmed; their ids in order."""
    conn = pika.BlockingConnection(pika.URLParameters(url))
    ch = conn.channel()
    ch.queue_declare(queue, durable=True)
    ch.confirm_delivery()
    ids = [f"{prefix}-{i}" for i in range(count)]
    for mid in ids:
        ch.basic_publish("", queue, body(mid), pika.BasicProperties(delivery_mode=2, message_id=mid))
    conn.close()
    return ids


def sync_marker(ch: pika.adapters.blocking_connection.BlockingChannel, queue: str = "sync-marker") -> None:
    """A confirmed persistent publish: its group's fsync covers every store record before it (the
    acks and deliveries made before it on this connection), so they are on disk once it returns."""
    ch.confirm_delivery()
    ch.queue_declare(queue, durable=True)
    ch.basic_publish("", queue, b"m", pika.BasicProperties(delivery_mode=2))
