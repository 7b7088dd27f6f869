"""A tiered stream in a cluster of three with a real etcd and a ``file://`` tier all nodes reach:
the followers get the leader's manifest and lose the local copies it let go (they do not keep
every segment), and after a kill -9 of the leader the new one reads the tiered segments to a
consumer from ``first``, in order, then the local ones."""

from __future__ import annotations

import uuid
from typing import Any

import pika
import pytest

from headrace.persistence.mirror_records import list_segments, mirror_dir
from headrace.persistence.stream_log import stream_root
from headrace.persistence.tier_manifest import MANIFEST
from nodes import Node, connect, leader_of, logs, start_all, wait_for
from tiering import declare_tiered_stream, offloaded

pytestmark = pytest.mark.timeout(180)

N = 300
STREAM = "events"


def body(i: int) -> bytes:
    return b"%06d" % i + b"x" * 1000


def test_followers_follow_the_tier_and_a_new_leader_reads_it(etcd: Any, broker_factory: Any, tmp_path: Any) -> None:
    name = "t" + uuid.uuid4().hex[:12]
    nodes = [Node(broker_factory, etcd, name, f"hr{i}@localhost", tmp_path / f"n{i}", HEADRACE_TIER_INTERVAL="0.1")
             for i in (1, 2, 3)]
    start_all(nodes)
    leader = leader_of(nodes)
    wait_for(lambda: len(leader.nodes()) == 3 and all(n.get("in_sync") for n in leader.nodes()), 30.0)
    declare_tiered_stream(f"amqp://guest:guest@127.0.0.1:{leader.amqp_port}/%2F", f"http://127.0.0.1:{leader.http_port}", STREAM, N, body,
                  f"file://{tmp_path / 'tier'}", policy="tier")
    wait_for(lambda: offloaded(leader.data_dir, STREAM, 5), 30.0)
    manifest = (mirror_dir(stream_root(leader.data_dir), "/", STREAM) / MANIFEST).read_bytes()
    for node in nodes:  # each holds the leader's manifest and only its active segment's .log
        wait_for(lambda node=node: offloaded(node.data_dir, STREAM, 5), 15.0)
        directory = mirror_dir(stream_root(node.data_dir), "/", STREAM)
        assert (directory / MANIFEST).read_bytes() == manifest
        assert len(list_segments(stream_root(node.data_dir), "/", STREAM)) == 1

    leader.proc.kill()
    new = leader_of([n for n in nodes if n is not leader])
    conn = connect(new)
    ch = conn.channel()
    try:
        assert ch.queue_declare(STREAM, durable=True, passive=True).method.message_count == N
    except pika.exceptions.ChannelClosedByBroker as exc:
        raise AssertionError(f"{exc} on {new.name}:\n" + logs(nodes)) from None
    ch.basic_qos(prefetch_count=100)
    got: list[tuple[int, bytes]] = []
    ch.basic_consume(STREAM, lambda c, m, p, b: (got.append((p.headers["x-stream-offset"], b)),
                                                  c.basic_ack(m.delivery_tag)), arguments={"x-stream-offset": "first"})
    deadline = 30.0
    wait_for(lambda: conn.process_data_events(time_limit=0.05) or len(got) >= N, deadline)
    assert got == [(i, body(i)) for i in range(N)]
    conn.close()
