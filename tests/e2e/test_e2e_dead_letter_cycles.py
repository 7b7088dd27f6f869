"""Dead-letter cycles with unmodified pika against a real headrace process: a message that goes
around a cycle of queues for automatic reasons only (here TTL expiry) is dropped when it would
enter a queue of its ``x-death`` history again, as RabbitMQ does; a cycle that includes a client's
reject goes on. While messages cycle, the queues never hold more than was published, and no
message is ever delivered twice for the same turn of the cycle.

Counts are read from one ``/api/queues`` listing: the broker answers it in one step, so both
queues are seen at the same instant. Two separate reads (one request per queue) can see the same
messages twice, once in each queue, when they move between the two reads."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable

import httpx
import pika
import pytest
from e2e_support import unique, wait_until

pytestmark = pytest.mark.timeout(60)

PUBLISHED = 100


def depths(http: httpx.Client, names: tuple[str, ...]) -> dict[str, dict]:
    """Each named queue's object from one listing (one instant for all of them)."""
    listing = http.get("/api/queues/%2F", params={"columns": "name,messages,message_stats"}).json()
    return {q["name"]: q for q in listing if q["name"] in names}


def total(http: httpx.Client, names: tuple[str, ...]) -> int:
    return sum(q["messages"] for q in depths(http, names).values())


def default_exchange_pair(ch, a: str, b: str) -> str:
    """a and b dead-letter to each other through the default exchange; publish to a by its name."""
    for name, other in ((a, b), (b, a)):
        ch.queue_declare(name, arguments={"x-message-ttl": 1, "x-dead-letter-exchange": "",
                                          "x-dead-letter-routing-key": other})
    return ""


def fanout_pair(ch, a: str, b: str) -> str:
    """Each queue's dead letters go to a fanout exchange bound to the other one."""
    for name, other in ((a, b), (b, a)):
        ch.exchange_declare(f"to-{other}", "fanout", auto_delete=True)
        ch.queue_declare(name, arguments={"x-message-ttl": 1, "x-dead-letter-exchange": f"to-{other}"})
    for name in (a, b):
        ch.queue_bind(name, f"to-{name}")
    return ""


def direct_pair(ch, a: str, b: str) -> str:
    """One direct exchange; each queue's dead-letter routing key names the other one's binding."""
    exchange = f"dx-{a}"
    ch.exchange_declare(exchange, "direct", auto_delete=True)
    for name, other in ((a, b), (b, a)):
        ch.queue_declare(name, arguments={"x-message-ttl": 1, "x-dead-letter-exchange": exchange,
                                          "x-dead-letter-routing-key": f"key-{other}"})
    for name in (a, b):
        ch.queue_bind(name, exchange, f"key-{name}")
    return exchange


@pytest.mark.parametrize("declare", [default_exchange_pair, fanout_pair, direct_pair],
                         ids=["default-exchange", "fanout", "direct"])
def test_a_ttl_cycle_drops_each_message_when_it_would_enter_a_queue_again(
        conn, ch, http, declare: Callable[..., str]):
    a, b = unique("cycle-a"), unique("cycle-b")
    names = (a, b)
    exchange = declare(ch, a, b)
    key = a if exchange == "" else f"key-{a}"
    seen: list[int] = []
    try:
        for i in range(PUBLISHED):
            ch.basic_publish(exchange, key, b"m", pika.BasicProperties(message_id=str(i)))
        # each message: expired in a -> b, expired in b -> would enter a again: dropped
        assert wait_until(lambda: seen.append(total(http, names)) or seen[-1] == 0, timeout=5), seen[-5:]
        assert max(seen) <= PUBLISHED, seen
        # and they stay gone: nothing was left cycling
        assert not wait_until(lambda: total(http, names) > 0, timeout=0.5)
        queues = depths(http, names)
        assert [queues[n]["message_stats"]["publish"] for n in names] == [PUBLISHED, PUBLISHED]
        started = time.monotonic()
        ch.queue_declare(a, passive=True)
        assert time.monotonic() - started < 0.5
    finally:
        ch.queue_delete(a)
        ch.queue_delete(b)


def test_a_cycle_with_a_client_reject_goes_on_and_never_duplicates_a_message(conn, ch, http):
    """a: consumed, each delivery rejected (requeue=false) until its third, dead-lettered to b;
    b: 1 ms TTL, dead-lettered back to a. RabbitMQ keeps such a cycle going (a client took part)."""
    a, b = unique("rcycle-a"), unique("rcycle-b")
    names = (a, b)
    rounds, published = 3, 20
    ch.queue_declare(a, arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": b})
    ch.queue_declare(b, arguments={"x-message-ttl": 1, "x-dead-letter-exchange": "",
                                   "x-dead-letter-routing-key": a})
    turns: dict[str, list[tuple[int, int]]] = defaultdict(list)  # message id -> (rejected, expired) counts
    acked: list[str] = []

    def on_message(channel, method, props, body):
        deaths = {(d["queue"], d["reason"]): d["count"] for d in (props.headers or {}).get("x-death", [])}
        turns[props.message_id].append((deaths.get((a, "rejected"), 0), deaths.get((b, "expired"), 0)))
        if len(turns[props.message_id]) < rounds:
            channel.basic_reject(method.delivery_tag, requeue=False)
        else:
            channel.basic_ack(method.delivery_tag)
            acked.append(props.message_id)

    ch.basic_consume(a, on_message)
    observed: list[int] = []
    try:
        for i in range(published):
            ch.basic_publish("", a, b"m", pika.BasicProperties(message_id=str(i)))
        assert wait_until(lambda: observed.append(total(http, names)) or len(acked) == published, conn,
                          timeout=10), (len(acked), observed[-5:])
        assert max(observed) <= published, observed
        # each message came back once per turn, its x-death counts one more each time: never twice
        expected = [(turn, turn) for turn in range(rounds)]
        assert sorted(acked, key=int) == [str(i) for i in range(published)]
        assert {mid: seen for mid, seen in turns.items() if seen != expected} == {}
        assert wait_until(lambda: total(http, names) == 0, conn, timeout=2)
    finally:
        ch.queue_delete(a)
        ch.queue_delete(b)
