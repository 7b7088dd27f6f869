"""Helpers for the tests that link two real brokers (shovels, exchange and queue federation): the
management API, publishing and draining, ports a broker keeps across its restarts, link status, a confirmed publisher that
outlives its broker's kill -9, and the kill-each-in-turn sequence those tests share. The pair itself
is the ``broker_pair`` fixture (conftest.py)."""

from __future__ import annotations

import random
import socket
import threading
from collections.abc import Callable
from types import TracebackType
from typing import Any
from urllib.parse import quote

import httpx
import pika
import pika.exceptions
from e2e_support import wait_until

AUTH = ("guest", "guest")
_TAKEN: set[int] = set()


def api(broker: Any, method: str, path: str, body: Any = None) -> httpx.Response:
    return httpx.request(method, f"{broker.http_url}{path}", auth=AUTH, json=body, timeout=5)


def queue_count(broker: Any, queue: str) -> int:
    """The queue's message count over the API; -1 while it does not exist (or the broker is down)."""
    try:
        r = api(broker, "GET", f"/api/queues/%2F/{quote(queue, safe='')}")
    except httpx.TransportError:
        return -1
    return int(r.json().get("messages", 0)) if r.status_code == 200 else -1


def free_port() -> int:
    """A port a broker keeps across its restarts: below the kernel's ephemeral range (32768 up), so
    no outgoing connection takes it while the broker is down, and free when chosen."""
    while True:
        port = random.randrange(20000, 32000)
        if port in _TAKEN:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _TAKEN.add(port)
        return port


def federation_link(broker: Any, **fields: Any) -> dict[str, Any] | None:
    """The first of the broker's federation links with these fields (any link if none are given)."""
    return next((link for link in api(broker, "GET", "/api/federation-links").json()
                 if all(link.get(k) == v for k, v in fields.items())), None)


def link_running(broker: Any, **fields: Any) -> Callable[[], bool]:
    """For ``wait_until``: a federation link with these fields reports "running"."""
    return lambda: (federation_link(broker, status="running", **fields) is not None)


def publish(url: str, queue: str, bodies: list[bytes], headers: dict[str, Any] | None = None, *,
            declare: bool = True) -> None:
    """Persistent messages with confirms to the queue, declared durable first unless ``declare`` is
    false (a queue a link declared, with its arguments)."""
    conn = pika.BlockingConnection(pika.URLParameters(url))
    ch = conn.channel()
    ch.confirm_delivery()
    if declare:
        ch.queue_declare(queue, durable=True)
    for body in bodies:
        ch.basic_publish("", queue, body, pika.BasicProperties(delivery_mode=2, headers=headers))
    conn.close()


def drain(url: str, queue: str) -> list[tuple[pika.BasicProperties, bytes]]:
    """Every message the queue holds, taken with ``basic.get`` and auto-ack."""
    conn = pika.BlockingConnection(pika.URLParameters(url))
    ch = conn.channel()
    out = []
    while True:
        method, props, body = ch.basic_get(queue, auto_ack=True)
        if method is None:
            break
        out.append((props, body))
    conn.close()
    return out


class Publisher:
    """Publishes persistent messages with confirms from a thread, each with a message id of
    ``prefix`` and a count, reconnecting while its broker is down; only a message whose confirm
    came is in ``confirmed``. Stops when the ``with`` block ends (or at ``stop()``)."""

    def __init__(self, broker: Any, exchange: str, routing_key: str, *, prefix: str, declare: bool = False,
                 mandatory: bool = False) -> None:
        self.broker, self.exchange, self.routing_key = broker, exchange, routing_key
        self.prefix, self.declare, self.mandatory = prefix, declare, mandatory
        self.confirmed: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Publisher:
        self._thread.start()
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            try:
                conn = pika.BlockingConnection(pika.URLParameters(self.broker.url))
                ch = conn.channel()
                ch.confirm_delivery()
                if self.declare:
                    ch.queue_declare(self.routing_key, durable=True)
                while not self._stop.is_set():
                    mid = f"{self.prefix}{i}"
                    i += 1
                    ch.basic_publish(self.exchange, self.routing_key, mid.encode(),
                                     pika.BasicProperties(delivery_mode=2, message_id=mid), mandatory=self.mandatory)
                    self.confirmed.append(mid)
                conn.close()
            except (pika.exceptions.AMQPError, OSError):
                self._stop.wait(0.2)  # the broker is down: try again


def kill_each_in_turn(arrived: Callable[[], int], step: int, *brokers: Any) -> None:
    """Under load: once ``step`` messages have arrived, kill -9 and restart each broker in turn, and
    after each restart wait for ``step`` more, so every broker dies with work in flight."""
    assert wait_until(lambda: arrived() > step, timeout=30), arrived()
    for broker in brokers:
        broker.kill()
        broker.start()
        mark = arrived()
        assert wait_until(lambda: arrived() > mark + step, timeout=30), (mark, arrived())
