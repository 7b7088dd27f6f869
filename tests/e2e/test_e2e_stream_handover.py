"""A partition's member demoted by a rebalance that never settles what it holds keeps the partition
for ``stream_handover_timeout_ms`` at most (2 s here): then the new active member reads on from
right after the group's last ack, so the held deliveries come again to it; the demoted member's
late acks are accepted but no longer move the group's offset, and it stays in the group."""

from __future__ import annotations

import time

import httpx
import pika
import pytest
from e2e_support import unique, wait_until

pytestmark = pytest.mark.timeout(60)

BOUND_S = 2.0
BROKER_ENV = {"HEADRACE_STREAM_HANDOVER_TIMEOUT_MS": str(int(BOUND_S * 1000))}
PREFETCH = 5


class Member:
    """A pika group member of a 2-partition super stream that keeps its deliveries unacked."""

    def __init__(self, broker, name: str, group: str) -> None:
        self.conn = pika.BlockingConnection(pika.URLParameters(broker.url))
        self.ch = self.conn.channel()
        self.ch.basic_qos(prefetch_count=PREFETCH)
        self.held: list[tuple[int, int]] = []  # partition 1's (delivery tag, offset)
        args = {"x-single-active-consumer": True, "x-stream-consumer-name": group, "x-stream-offset": "first",
                "x-super-stream": name}
        for i in range(2):
            self.ch.basic_consume(f"{name}-{i}", self._keep if i == 1 else lambda *a: None, arguments=args)

    def _keep(self, chan, method, props, body) -> None:
        self.held.append((method.delivery_tag, props.headers["x-stream-offset"]))

    def pump(self) -> bool:
        self.conn.process_data_events(time_limit=0.02)
        return True


def group_of(http: httpx.Client, name: str) -> dict:
    (group,) = http.get(f"/api/stream-groups/%2F/{name}").json()
    return next(p for p in group["partitions"] if p["partition"] == 1)


def test_a_demoted_member_that_holds_its_deliveries_is_let_go_after_the_bound(broker, http):
    name, group = unique("ho"), unique("g")
    assert http.put(f"/api/super-streams/%2F/{name}", json={"partitions": 2}).status_code == 201
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    pub = conn.channel()
    pub.confirm_delivery()
    for n in range(40):
        pub.basic_publish(name, "1", f"m{n}".encode())  # the binding key: partition 1
    conn.close()

    a = Member(broker, name, group)  # alone: active on both partitions
    assert wait_until(lambda: len(a.held) == PREFETCH, a.conn), a.held
    a.ch.basic_ack(a.held[1][0], multiple=True)  # offsets 0 and 1 acked; 2 to 6 (its credit again) held for good
    assert wait_until(lambda: len(a.held) == PREFETCH + 2, a.conn), a.held
    assert group_of(http, name)["committed_offset"] == 1

    joined = time.monotonic()
    b = Member(broker, name, group)  # member 1 mod 2: partition 1 is b's now, once a lets go
    assert not wait_until(lambda: a.pump() and bool(b.held), b.conn, timeout=BOUND_S / 2)
    assert wait_until(lambda: a.pump() and len(b.held) == PREFETCH, b.conn, timeout=BOUND_S + 8), b.held
    waited = time.monotonic() - joined
    assert waited >= BOUND_S, waited
    # right after the group's last ack: what a still holds comes again, in order
    assert [offset for _, offset in b.held] == list(range(2, 2 + PREFETCH))

    # a's late acks are taken (its channel stays open) but move the group's offset no more
    a.ch.basic_ack(a.held[-1][0], multiple=True)
    a.pump()
    assert a.ch.is_open
    b.pump()
    assert group_of(http, name)["committed_offset"] == 1
    b.ch.basic_ack(b.held[-1][0], multiple=True)
    assert wait_until(lambda: group_of(http, name)["committed_offset"] == 2 + PREFETCH - 1, timeout=5)
    assert wait_until(lambda: len(b.held) == 2 * PREFETCH, b.conn)
    assert len(a.held) == PREFETCH + 2  # demoted, it got nothing more; still a member
    assert group_of(http, name)["waiting"] == 1
    a.conn.close()
    b.conn.close()
