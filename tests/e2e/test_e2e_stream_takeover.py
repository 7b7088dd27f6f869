"""A partition's active member demoted by a rebalance while it still holds unacked deliveries: the
new active member gets the partition's backlog as soon as those are settled (acked) or returned
(channel closed), with no publish needed to start it, from right after the group's last ack."""

from __future__ import annotations

import httpx
import pika
import pytest
from e2e_support import unique, wait_until

pytestmark = pytest.mark.timeout(60)

PREFETCH = 5
BACKLOG = 40


class Holder:
    """A group member that keeps what it is sent unacked until told to settle it."""

    def __init__(self, broker, name: str, group: str) -> None:
        self.conn = pika.BlockingConnection(pika.URLParameters(broker.url))
        self.ch = self.conn.channel()
        self.ch.basic_qos(prefetch_count=PREFETCH)
        self.held: dict[str, list[tuple[int, int]]] = {}  # stream -> [(delivery tag, offset)]
        args = {"x-single-active-consumer": True, "x-stream-consumer-name": group, "x-stream-offset": "first",
                "x-super-stream": name}
        for i in range(2):
            stream = f"{name}-{i}"
            self.held[stream] = []
            self.ch.basic_consume(stream, self._keep(stream), arguments=args, consumer_tag=f"{stream}")

    def _keep(self, stream: str):
        def on_message(chan, method, props, body):
            self.held[stream].append((method.delivery_tag, props.headers["x-stream-offset"]))
        return on_message

    def pump(self) -> None:
        if self.conn.is_open:
            self.conn.process_data_events(time_limit=0.02)


def setup(broker, http: httpx.Client) -> tuple[str, str]:
    """A 2-partition super stream whose partition 1 holds a backlog of BACKLOG messages."""
    name, group = unique("tk"), unique("g")
    assert http.put(f"/api/super-streams/%2F/{name}", json={"partitions": 2}).status_code == 201
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    ch = conn.channel()
    ch.confirm_delivery()
    for n in range(BACKLOG):
        ch.basic_publish(name, "1", f"m{n}".encode())  # the binding key: partition 1
    conn.close()
    return name, group


def active_tags(http: httpx.Client, stream: str) -> list[bool]:
    return [c["active"] for c in http.get(f"/api/queues/%2F/{stream}").json()["stream"]["consumers"]]


def demoted(broker, http: httpx.Client) -> tuple[str, Holder, Holder]:
    """Member a alone (active on both partitions) holds a full prefetch window of partition 1
    unacked; member b joins and becomes partition 1's active member (member 1 mod 2)."""
    name, group = setup(broker, http)
    a = Holder(broker, name, group)
    part = f"{name}-1"
    assert wait_until(lambda: len(a.held[part]) == PREFETCH, a.conn)
    b = Holder(broker, name, group)
    assert wait_until(lambda: active_tags(http, part) == [False, True], timeout=5)
    # b is active but a's deliveries are out: b waits (else the key order would break)
    assert not wait_until(lambda: (a.pump(), b.pump(), bool(b.held[part]))[2], timeout=0.5)
    return part, a, b


def test_demoted_member_acks_and_the_new_active_one_starts_at_once(broker, http):
    part, a, b = demoted(broker, http)
    a.ch.basic_ack(a.held[part][-1][0], multiple=True)  # acked: the group's offset is now PREFETCH - 1
    # no publish follows: the settle alone starts b, right after the group's last ack
    assert wait_until(lambda: (a.pump(), len(b.held[part]) == PREFETCH)[1], b.conn, timeout=5), b.held[part]
    assert [offset for _, offset in b.held[part]] == list(range(PREFETCH, 2 * PREFETCH))
    b.ch.basic_ack(b.held[part][-1][0], multiple=True)
    assert wait_until(lambda: len(b.held[part]) == 2 * PREFETCH, b.conn)
    assert len(a.held[part]) == PREFETCH  # a, demoted, got nothing more
    a.conn.close()
    b.conn.close()


def test_demoted_member_closes_its_channel_and_what_it_held_goes_to_the_new_one(broker, http):
    part, a, b = demoted(broker, http)
    a.ch.basic_ack(a.held[part][1][0], multiple=True)  # two acked, three still out
    a.pump()
    a.ch.close()  # the three go back: b is sent them, from right after the group's last ack
    assert wait_until(lambda: len(b.held[part]) == PREFETCH, b.conn, timeout=5), b.held[part]
    assert [offset for _, offset in b.held[part]] == list(range(2, 2 + PREFETCH))
    a.conn.close()
    b.conn.close()


def test_demoted_member_rejects_and_the_new_one_is_sent_those_again(broker, http):
    part, a, b = demoted(broker, http)
    for tag, _ in a.held[part]:
        a.ch.basic_nack(tag, requeue=True)  # returned, not acked: the group's offset does not move
    assert wait_until(lambda: (a.pump(), len(b.held[part]) == PREFETCH)[1], b.conn, timeout=5), b.held[part]
    assert [offset for _, offset in b.held[part]] == list(range(PREFETCH))
    a.conn.close()
    b.conn.close()


def test_a_partition_moving_back_before_any_ack_resends_what_was_returned(broker, http):
    """No ack in the group yet: the partition goes a -> b -> a, each returning what it held; a,
    active again, starts over from its own start, so nothing it sent before and got back is lost."""
    part, a, b = demoted(broker, http)
    for tag, _ in a.held[part]:
        a.ch.basic_nack(tag, requeue=True)
    assert wait_until(lambda: (a.pump(), len(b.held[part]) == PREFETCH)[1], b.conn, timeout=5), b.held[part]
    a.held[part].clear()
    b.conn.close()  # b leaves holding them unacked: partition 1 is a's again
    assert wait_until(lambda: len(a.held[part]) == PREFETCH, a.conn, timeout=5), a.held[part]
    assert [offset for _, offset in a.held[part]] == list(range(PREFETCH))
    a.conn.close()
