"""``HEADRACE_PURE_PYTHON=1`` reaches the broker process: it maps neither C module (the wire work,
``server/amqp/_wire``, nor the mirror framing, ``persistence/_mirror_frame``) and runs their
Python twins, and a real client's publish, consume and ack round through a mirrored exchange
works on them, the mirror log reading back what was published. Without the variable the same
broker maps every C module the install built, so the check above tells the two apart."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pika
import pytest
from e2e_support import unique, wait_until
from headrace.persistence.mirror_log import list_segments, read_entries

pytestmark = pytest.mark.timeout(60)

C_MODULES = {"_wire": "headrace.server.amqp._wire", "_mirror_frame": "headrace.persistence._mirror_frame"}
BUILT = {name for name, module in C_MODULES.items() if importlib.util.find_spec(module) is not None}


def mapped_c_modules(proc) -> set[str]:
    """The C modules the broker process has loaded (each a shared object mapped into it)."""
    maps = Path(f"/proc/{proc.proc.pid}/maps").read_text()
    return {name for name in C_MODULES if f"/{name}.cpython" in maps}


def round_trip(proc, n: int = 200) -> None:
    """Publish with confirms to a mirrored exchange (half with headers, which the framing handles
    apart), consume with manual acks, and read the mirror log back."""
    exchange, queue = unique("pure-x"), unique("pure-q")
    conn = pika.BlockingConnection(pika.URLParameters(proc.url))
    ch = conn.channel()
    ch.exchange_declare(exchange, "topic", durable=True, arguments={"x-mirror": True})
    ch.queue_declare(queue, durable=True)
    ch.queue_bind(queue, exchange, "#")
    ch.confirm_delivery()
    sent = [(f"k.{i % 3}", b"%d:" % i + b"x" * (i * 7)) for i in range(n)]
    for i, (key, body) in enumerate(sent):
        props = pika.BasicProperties(delivery_mode=2, headers={"i": str(i)} if i % 2 else None,
                                     message_id=f"m{i}")
        ch.basic_publish(exchange, key, body, props)
    ch.basic_qos(prefetch_count=50)
    got: list[tuple[str, bytes, str]] = []
    for method, props, body in ch.consume(queue, inactivity_timeout=10):
        assert method is not None, f"only {len(got)} of {n} delivered"
        got.append((method.routing_key, body, props.message_id))
        ch.basic_ack(method.delivery_tag)
        if len(got) == n:
            break
    ch.cancel()
    assert got == [(key, body, f"m{i}") for i, (key, body) in enumerate(sent)]
    assert ch.queue_declare(queue, passive=True).method.message_count == 0  # every ack settled
    conn.close()

    def mirrored() -> list:
        return [e for s in list_segments(proc.data_dir, "/", exchange) for e in read_entries(s)]

    assert wait_until(lambda: len(mirrored()) == n, timeout=10), len(mirrored())
    entries = mirrored()
    assert [(e.routing_key, e.body, e.message_id) for e in entries] == got
    assert [e.headers for e in entries] == [{"i": str(i)} if i % 2 else None for i in range(n)]


def test_pure_python_mode_reaches_the_broker_and_serves_a_round(broker_factory):
    proc = broker_factory(env={"HEADRACE_PURE_PYTHON": "1"})
    round_trip(proc)
    assert mapped_c_modules(proc) == set()


def test_without_it_the_broker_runs_the_c_modules_built(broker_factory):
    proc = broker_factory(env={"HEADRACE_PURE_PYTHON": "0"})  # whatever this test process was given
    round_trip(proc)
    assert mapped_c_modules(proc) == BUILT
