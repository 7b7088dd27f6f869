"""AMQP semantics end to end with unmodified pika against a real headrace process: dispatch, pub/sub,
redelivery, overflow, dead letters, single active consumer, priorities, expiry, recover, flow,
unbind, conditional deletes, internal exchanges, qos, auto-delete, refusals, heartbeats while
blocked, and x-expires and message TTLs across a restart."""

from __future__ import annotations

import time

import httpx
import pika
import pika.exceptions
import pytest
from e2e_support import celery_worker, unique, wait_until

pytestmark = pytest.mark.timeout(60)


def settle(conn: pika.BlockingConnection) -> None:
    """A round trip on the connection (a channel opened and closed): every delivery the broker
    sent before its reply has reached the callbacks."""
    conn.channel().close()
    conn.process_data_events(time_limit=0)


def collect(ch, queue: str, *, auto_ack: bool = True, **kw) -> list[tuple]:
    got: list[tuple] = []
    ch.basic_consume(queue, lambda c, m, p, b: got.append((m, p, b)), auto_ack=auto_ack, **kw)
    return got


# ---------------------------------------------------------------------- dispatch
def test_work_queue_fair_dispatch_gives_the_fast_consumer_more(conn):
    slow_ch, fast_ch = conn.channel(), conn.channel()
    q = slow_ch.queue_declare(unique("work"), exclusive=True).method.queue
    slow_ch.basic_qos(prefetch_count=1)
    fast_ch.basic_qos(prefetch_count=1)
    slow = collect(slow_ch, q, auto_ack=False)  # never acks while the work lasts
    fast: list[bytes] = []

    def fast_worker(c, m, p, b):
        fast.append(b)
        c.basic_ack(m.delivery_tag)

    fast_ch.basic_consume(q, fast_worker)
    for i in range(10):
        slow_ch.basic_publish("", q, b"%d" % i)
    assert wait_until(lambda: len(slow) + len(fast) == 10, conn)
    assert len(slow) == 1 and len(fast) == 9


def test_consumer_deliveries_count_unacked_bytes_and_acks_return_them(broker, conn, ch):
    q = ch.queue_declare(unique("bytes"), exclusive=True).method.queue
    got = collect(ch, q, auto_ack=False)
    for _ in range(3):
        ch.basic_publish("", q, b"x" * 1000)
    assert wait_until(lambda: len(got) == 3, conn)
    with httpx.Client(base_url=broker.http_url, auth=("guest", "guest"), timeout=5) as http:
        info = http.get(f"/api/queues/%2F/{q}").json()
        assert info["message_bytes_unacknowledged"] == 3000 and info["memory"] > 3000
        ch.basic_ack(got[-1][0].delivery_tag, multiple=True)
        settle(conn)
        info = http.get(f"/api/queues/%2F/{q}").json()
        assert info["message_bytes_unacknowledged"] == 0 and info["memory"] == 0


def test_pub_sub_fanout_delivers_every_message_to_each_consumer(conn, ch):
    ex = unique("fan")
    ch.exchange_declare(ex, "fanout", auto_delete=True)
    seen = []
    for _ in range(2):
        q = ch.queue_declare("", exclusive=True).method.queue
        ch.queue_bind(q, ex)
        seen.append(collect(ch, q))
    for i in range(3):
        ch.basic_publish(ex, "", b"event-%d" % i)
    assert wait_until(lambda: all(len(s) == 3 for s in seen), conn)
    for got in seen:
        assert [b for _, _, b in got] == [b"event-0", b"event-1", b"event-2"]


def test_consumer_crash_redelivers_to_another_consumer(broker, ch, conn):
    q = ch.queue_declare(unique("crash")).method.queue
    crashy = pika.BlockingConnection(pika.URLParameters(broker.url))
    got = collect(crashy.channel(), q, auto_ack=False)
    ch.basic_publish("", q, b"work")
    assert wait_until(lambda: len(got) == 1, crashy)
    assert not got[0][0].redelivered
    crashy._impl._transport._sock.close()  # abrupt: no connection.close, nothing acked
    other = collect(ch, q, auto_ack=False)
    assert wait_until(lambda: len(other) == 1, conn)
    method, _, body = other[0]
    assert body == b"work" and method.redelivered
    ch.basic_ack(method.delivery_tag)
    ch.queue_delete(q)


# ---------------------------------------------------------------------- bounds and dead letters
def dead_letter_queue(ch, exchange: str, routing_key: str = "#") -> str:
    ch.exchange_declare(exchange, "topic", auto_delete=True)
    dlq = ch.queue_declare("", exclusive=True).method.queue
    ch.queue_bind(dlq, exchange, routing_key)
    return dlq


def test_max_length_drop_head_drops_the_oldest_and_dead_letters_it(conn, ch):
    dlx = unique("dlx")
    dlq = dead_letter_queue(ch, dlx)
    q = ch.queue_declare(unique("q"), exclusive=True, arguments={
        "x-max-length": 2, "x-dead-letter-exchange": dlx}).method.queue
    for i in range(3):
        ch.basic_publish("", q, b"%d" % i)
    assert ch.queue_declare(q, passive=True).method.message_count == 2
    assert [ch.basic_get(q, auto_ack=True)[2] for _ in range(2)] == [b"1", b"2"]
    dead = collect(ch, dlq)
    assert wait_until(lambda: len(dead) == 1, conn)
    assert dead[0][2] == b"0" and dead[0][1].headers["x-death"][0]["reason"] == "maxlen"


def test_max_length_reject_publish_nacks_with_confirms(ch):
    ch.confirm_delivery()
    q = ch.queue_declare(unique("q"), exclusive=True, arguments={
        "x-max-length": 1, "x-overflow": "reject-publish"}).method.queue
    ch.basic_publish("", q, b"kept")
    with pytest.raises(pika.exceptions.NackError):
        ch.basic_publish("", q, b"refused")
    assert ch.basic_get(q, auto_ack=True)[2] == b"kept"
    assert ch.queue_declare(q, passive=True).method.message_count == 0


def test_max_length_reject_publish_dlx_nacks_and_dead_letters(conn, ch):
    dlx = unique("dlx")
    dlq = dead_letter_queue(ch, dlx)
    dead = collect(ch, dlq)
    ch.confirm_delivery()
    q = ch.queue_declare(unique("q"), exclusive=True, arguments={
        "x-max-length": 1, "x-overflow": "reject-publish-dlx", "x-dead-letter-exchange": dlx}).method.queue
    ch.basic_publish("", q, b"kept")
    with pytest.raises(pika.exceptions.NackError):
        ch.basic_publish("", q, b"refused")
    assert wait_until(lambda: len(dead) == 1, conn)
    assert dead[0][2] == b"refused" and dead[0][1].headers["x-death"][0]["reason"] == "maxlen"
    assert ch.basic_get(q, auto_ack=True)[2] == b"kept"


def test_max_length_bytes_drops_from_the_head(ch):
    q = ch.queue_declare(unique("q"), exclusive=True, arguments={"x-max-length-bytes": 10}).method.queue
    for body in (b"aaaaaa", b"bbbbbb", b"cccc"):
        ch.basic_publish("", q, body)
    assert ch.queue_declare(q, passive=True).method.message_count == 2  # 6 + 4 bytes fit, 12 did not
    assert [ch.basic_get(q, auto_ack=True)[2] for _ in range(2)] == [b"bbbbbb", b"cccc"]


def test_dead_letter_routing_key_replaces_the_original_key(conn, ch):
    dlx = unique("dlx")
    dlq = dead_letter_queue(ch, dlx, "parked")
    dead = collect(ch, dlq)
    q = ch.queue_declare(unique("q"), exclusive=True, arguments={
        "x-dead-letter-exchange": dlx, "x-dead-letter-routing-key": "parked"}).method.queue
    ch.basic_publish("", q, b"bad")
    method, _, _ = ch.basic_get(q)
    ch.basic_reject(method.delivery_tag, requeue=False)
    assert wait_until(lambda: len(dead) == 1, conn)
    method, props, body = dead[0]
    assert body == b"bad" and method.routing_key == "parked" and method.exchange == dlx
    death = props.headers["x-death"][0]
    assert death["reason"] == "rejected" and death["queue"] == q and death["routing-keys"] == [q]


def test_delivery_limit_counts_returns_and_dead_letters_past_the_limit(conn, ch):
    dlx = unique("dlx")
    dlq = dead_letter_queue(ch, dlx)
    dead = collect(ch, dlq)
    q = ch.queue_declare(unique("q"), exclusive=True, arguments={
        "x-delivery-limit": 1, "x-dead-letter-exchange": dlx}).method.queue
    counts: list[object] = []

    def refuse(c, m, p, b):
        counts.append((p.headers or {}).get("x-delivery-count"))
        c.basic_nack(m.delivery_tag, requeue=True)

    ch.basic_consume(q, refuse)
    ch.basic_publish("", q, b"poison")
    assert wait_until(lambda: len(dead) == 1, conn)
    assert counts == [None, 1]  # the second delivery tells the consumer it came back once
    assert dead[0][2] == b"poison" and dead[0][1].headers["x-death"][0]["reason"] == "delivery_limit"


# ---------------------------------------------------------------------- consumers
def test_single_active_consumer_gets_everything_until_it_cancels(conn):
    first_ch, second_ch = conn.channel(), conn.channel()
    q = first_ch.queue_declare(unique("sac"), exclusive=True,
                               arguments={"x-single-active-consumer": True}).method.queue
    first = collect(first_ch, q)
    second = collect(second_ch, q)
    for i in range(3):
        first_ch.basic_publish("", q, b"a%d" % i)
    assert wait_until(lambda: len(first) == 3, conn)
    settle(conn)
    assert second == []
    first_ch.basic_cancel(first_ch.consumer_tags[0])
    for i in range(2):
        first_ch.basic_publish("", q, b"b%d" % i)
    assert wait_until(lambda: len(second) == 2, conn)
    assert [b for _, _, b in second] == [b"b0", b"b1"] and len(first) == 3


def test_consumer_priority_serves_the_higher_priority_consumer_first(conn):
    high_ch, low_ch = conn.channel(), conn.channel()
    q = high_ch.queue_declare(unique("prio"), exclusive=True).method.queue
    high_ch.basic_qos(prefetch_count=2)
    low_ch.basic_qos(prefetch_count=2)
    low = collect(low_ch, q, auto_ack=False, arguments={"x-priority": 0})
    high = collect(high_ch, q, auto_ack=False, arguments={"x-priority": 10})
    for i in range(3):
        high_ch.basic_publish("", q, b"%d" % i)
    assert wait_until(lambda: len(high) + len(low) == 3, conn)
    assert [b for _, _, b in high] == [b"0", b"1"] and [b for _, _, b in low] == [b"2"]


def test_qos_without_global_raises_the_prefetch_of_an_existing_consumer(conn, ch):
    q = ch.queue_declare(unique("q"), exclusive=True).method.queue
    for i in range(5):
        ch.basic_publish("", q, b"%d" % i)
    ch.basic_qos(prefetch_count=1)
    got = collect(ch, q, auto_ack=False)
    assert wait_until(lambda: len(got) == 1, conn)
    settle(conn)
    assert len(got) == 1
    ch.basic_qos(prefetch_count=3)  # celery's ETA path: more credit for the running consumer
    assert wait_until(lambda: len(got) == 3, conn)
    settle(conn)
    assert len(got) == 3


def test_qos_global_limits_the_whole_channel(conn, ch):
    q1 = ch.queue_declare("", exclusive=True).method.queue
    q2 = ch.queue_declare("", exclusive=True).method.queue
    for q in (q1, q2):
        for i in range(3):
            ch.basic_publish("", q, b"%d" % i)
    ch.basic_qos(prefetch_count=2, global_qos=True)
    got = collect(ch, q1, auto_ack=False)
    got2 = collect(ch, q2, auto_ack=False)
    assert wait_until(lambda: len(got) + len(got2) == 2, conn)
    settle(conn)
    assert len(got) + len(got2) == 2
    last = max((m.delivery_tag for m, _, _ in got + got2))
    ch.basic_ack(last, multiple=True)
    assert wait_until(lambda: len(got) + len(got2) == 4, conn)


def test_auto_delete_queue_goes_when_its_last_consumer_cancels(conn, ch):
    q = ch.queue_declare(unique("auto"), auto_delete=True).method.queue
    a = ch.basic_consume(q, lambda *args: None)
    b = ch.basic_consume(q, lambda *args: None)
    ch.basic_cancel(a)
    assert ch.queue_declare(q, passive=True).method.consumer_count == 1
    ch.basic_cancel(b)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.queue_declare(q, passive=True)
    assert info.value.reply_code == 404


# ---------------------------------------------------------------------- expiry
def test_per_message_expiration_dead_letters_the_message(conn, ch):
    dlx = unique("dlx")
    dlq = dead_letter_queue(ch, dlx)
    dead = collect(ch, dlq)
    q = ch.queue_declare(unique("q"), exclusive=True, arguments={"x-dead-letter-exchange": dlx}).method.queue
    ch.basic_publish("", q, b"short-lived", pika.BasicProperties(expiration="50"))
    ch.basic_publish("", q, b"lasting")
    assert wait_until(lambda: len(dead) == 1, conn)
    assert dead[0][2] == b"short-lived" and dead[0][1].headers["x-death"][0]["reason"] == "expired"
    assert ch.basic_get(q, auto_ack=True)[2] == b"lasting"


def test_durable_queue_with_x_expires_survives_a_restart(broker_factory, tmp_path):
    proc = broker_factory()
    c = pika.BlockingConnection(pika.URLParameters(proc.url))
    c.channel().queue_declare("leased", durable=True, arguments={"x-expires": 3_600_000})
    c.close()
    assert proc.stop() == 0
    proc = broker_factory(data_dir=proc.data_dir)
    c = pika.BlockingConnection(pika.URLParameters(proc.url))
    # a probe queue that expires after 50 ms: once it is gone, the clock has ticked after the
    # load, and a lease dated at time 0 would have expired the restored queue on that tick too
    c.channel().queue_declare("probe", arguments={"x-expires": 50})

    with httpx.Client(base_url=proc.http_url, auth=("guest", "guest"), timeout=5) as http:
        # looked at over HTTP: a passive declare would renew the probe's lease
        assert wait_until(lambda: http.get("/api/queues/%2F/probe").status_code == 404, c)
    ok = c.channel().queue_declare("leased", passive=True)
    assert ok.method.queue == "leased"
    c.close()


def test_a_recovered_message_expires_by_its_ttl_after_a_restart(broker_factory):
    """The clock learns of every recovered queue's deadlines once recovery is done (``Broker.arm_all``):
    nothing else would touch this queue, so unarmed its message would stay for ever."""
    proc = broker_factory()
    c = pika.BlockingConnection(pika.URLParameters(proc.url))
    ch = c.channel()
    ch.queue_declare("expired-here", durable=True)
    ch.queue_declare("short-lived", durable=True, arguments={
        "x-message-ttl": 500, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "expired-here"})
    ch.confirm_delivery()
    ch.basic_publish("", "short-lived", b"recovered", pika.BasicProperties(delivery_mode=2))
    c.close()
    assert proc.stop() == 0  # within the TTL or not: either way it expires only on the new clock
    proc = broker_factory(data_dir=proc.data_dir)
    with httpx.Client(base_url=proc.http_url, auth=("guest", "guest"), timeout=5) as http:
        def moved() -> bool:  # read over HTTP, which neither consumes nor re-arms the queue
            return (http.get("/api/queues/%2F/short-lived").json()["messages"] == 0
                    and http.get("/api/queues/%2F/expired-here").json()["messages"] == 1)

        assert wait_until(moved, timeout=10)
    c = pika.BlockingConnection(pika.URLParameters(proc.url))
    method, props, body = c.channel().basic_get("expired-here", auto_ack=True)
    assert body == b"recovered" and props.headers["x-death"][0]["reason"] == "expired"
    c.close()


# ---------------------------------------------------------------------- methods
def test_basic_recover_requeues_unacked_as_redelivered(conn, ch):
    q = ch.queue_declare(unique("q"), exclusive=True).method.queue
    got = collect(ch, q, auto_ack=False)
    ch.basic_publish("", q, b"again")
    assert wait_until(lambda: len(got) == 1, conn)
    ch.basic_recover(requeue=True)
    assert wait_until(lambda: len(got) == 2, conn)
    assert [m.redelivered for m, _, _ in got] == [False, True] and got[1][2] == b"again"


def test_basic_recover_without_requeue_is_540_as_rabbitmq(broker):
    c = pika.BlockingConnection(pika.URLParameters(broker.url))
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as info:
        c.channel().basic_recover(requeue=False)
    assert info.value.reply_code == 540 and "requeue=false" in info.value.reply_text


def test_channel_flow_pauses_and_resumes_deliveries(conn, ch):
    q = ch.queue_declare(unique("q"), exclusive=True).method.queue
    assert ch.flow(False) is False
    got = collect(ch, q)
    ch.basic_publish("", q, b"held")
    settle(conn)
    assert got == [] and ch.queue_declare(q, passive=True).method.message_count == 1
    assert ch.flow(True) is True
    assert wait_until(lambda: len(got) == 1, conn)


def test_exchange_unbind_stops_routing_through_the_binding(ch):
    src, dst = unique("src"), unique("dst")
    ch.exchange_declare(src, "direct", auto_delete=False)
    ch.exchange_declare(dst, "fanout", auto_delete=False)
    q = ch.queue_declare("", exclusive=True).method.queue
    ch.queue_bind(q, dst)
    ch.exchange_bind(dst, src, routing_key="k")
    ch.basic_publish(src, "k", b"through")
    assert ch.basic_get(q, auto_ack=True)[2] == b"through"
    ch.exchange_unbind(dst, src, routing_key="k")
    ch.basic_publish(src, "k", b"nowhere")
    assert ch.queue_declare(q, passive=True).method.message_count == 0
    ch.exchange_delete(src)
    ch.exchange_delete(dst)


def test_queue_unbind_stops_routing_to_the_queue(ch):
    q = ch.queue_declare("", exclusive=True).method.queue
    ch.queue_bind(q, "amq.direct", "rk-" + q)
    ch.basic_publish("amq.direct", "rk-" + q, b"bound")
    ch.queue_unbind(q, "amq.direct", "rk-" + q)
    ch.basic_publish("amq.direct", "rk-" + q, b"unbound")
    assert ch.queue_declare(q, passive=True).method.message_count == 1
    assert ch.basic_get(q, auto_ack=True)[2] == b"bound"


def test_queue_delete_if_unused_and_if_empty_refuse_with_406(conn):
    ch = conn.channel()
    q = ch.queue_declare(unique("q")).method.queue
    ch.basic_consume(q, lambda *args: None)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.queue_delete(q, if_unused=True)
    assert info.value.reply_code == 406 and "in use" in info.value.reply_text
    ch = conn.channel()
    ch.basic_publish("", q, b"x")  # the consumer went with its channel
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        conn.channel().queue_delete(q, if_empty=True)
    assert info.value.reply_code == 406 and "not empty" in info.value.reply_text
    assert conn.channel().queue_delete(q, if_unused=True).method.message_count == 1


def test_exchange_delete_if_unused_refuses_with_406(conn):
    ch = conn.channel()
    ex = unique("ex")
    ch.exchange_declare(ex, "direct")
    q = ch.queue_declare("", exclusive=True).method.queue
    ch.queue_bind(q, ex, "k")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.exchange_delete(ex, if_unused=True)
    assert info.value.reply_code == 406
    conn.channel().exchange_delete(ex)


def test_publishing_to_an_internal_exchange_is_403(conn):
    ch = conn.channel()
    ex = unique("internal")
    ch.exchange_declare(ex, "fanout", internal=True)
    ch.basic_publish(ex, "", b"x")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.queue_declare("", exclusive=True)  # the next round trip sees the channel closed
    assert info.value.reply_code == 403 and "internal exchange" in info.value.reply_text
    conn.channel().exchange_delete(ex)


def test_exclusive_redeclare_is_405_resource_locked(broker, ch):
    q = ch.queue_declare(unique("q"), exclusive=True).method.queue
    other = pika.BlockingConnection(pika.URLParameters(broker.url))
    for kwargs in ({}, {"exclusive": True}, {"passive": True}):
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            other.channel().queue_declare(q, **kwargs)
        assert info.value.reply_code == 405, kwargs
    other.close()


def test_redeclare_without_a_queue_argument_is_406(conn):
    ch = conn.channel()
    q = ch.queue_declare(unique("q"), exclusive=True, arguments={"x-message-ttl": 60000}).method.queue
    assert ch.queue_declare(q, exclusive=True, arguments={"x-message-ttl": 60000}).method.queue == q
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.queue_declare(q, exclusive=True)
    assert info.value.reply_code == 406 and "x-message-ttl" in info.value.reply_text


# ---------------------------------------------------------------------- connections
def test_wrong_password_is_403_and_unknown_vhost_is_530(broker):
    bad_password = pika.URLParameters(f"amqp://guest:wrong@127.0.0.1:{broker.amqp_port}/%2F")
    with pytest.raises(pika.exceptions.ProbableAuthenticationError) as info:
        pika.BlockingConnection(bad_password)
    assert "(403)" in info.value.args[0] and "ACCESS_REFUSED" in info.value.args[0]
    no_vhost = pika.URLParameters(f"amqp://guest:guest@127.0.0.1:{broker.amqp_port}/nope")
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError) as info:
        pika.BlockingConnection(no_vhost)
    assert "(530)" in info.value.args[0] and "NOT_ALLOWED" in info.value.args[0]


def test_blocked_publisher_is_not_dropped_for_missed_heartbeats(broker_factory):
    # held memory counts each connection, channel, queue and binding too (~50 kB for the two
    # connections here), so the watermark sits above that and below it plus one 200 kB message
    proc = broker_factory(env={"HEADRACE_HEARTBEAT": "1", "HEADRACE_MEMORY_HIGH_WATERMARK": "100000"})
    params = pika.URLParameters(proc.url)
    params.heartbeat = 1
    events: list[str] = []
    publisher = pika.BlockingConnection(params)
    publisher.add_on_connection_blocked_callback(lambda c, f: events.append("blocked"))
    publisher.add_on_connection_unblocked_callback(lambda c, f: events.append("unblocked"))
    pch = publisher.channel()
    pch.queue_declare("held")
    pch.basic_publish("", "held", b"m" * 200_000)  # above the 100 kB watermark: alarm
    assert wait_until(lambda: events == ["blocked"], publisher)
    pch.basic_publish("", "held", b"waits in the socket")  # not read while blocked
    # several heartbeat timeouts (2 x 1 s) pass while the broker does not read this connection
    deadline = time.monotonic() + 4
    while time.monotonic() < deadline:
        publisher.process_data_events(time_limit=0.2)
    assert publisher.is_open
    consumer = pika.BlockingConnection(pika.URLParameters(proc.url))
    assert consumer.channel().basic_get("held", auto_ack=True)[2] == b"m" * 200_000
    assert wait_until(lambda: "unblocked" in events, publisher, timeout=10)
    assert wait_until(lambda: consumer.channel().queue_declare("held", passive=True).method.message_count == 1,
                      consumer)
    assert publisher.is_open and "missed heartbeats" not in proc.log
    publisher.close()
    consumer.close()


@pytest.mark.timeout(90)
def test_celery_worker_with_more_eta_tasks_than_prefetch_still_runs_new_tasks(broker, tmp_path):
    """celery holds ETA tasks unacked and raises its prefetch (basic.qos global=false) for each one;
    the running consumer must get that credit, or a task sent after them waits for the ETAs."""
    with celery_worker(broker.url, unique("celery-eta"), tmp_path) as app:
        for i in range(6):  # prefetch is 4 (multiplier 4 x concurrency 1)
            app.send_task("e2e.add", (i, i), countdown=3600)
        assert app.send_task("e2e.add", (20, 22)).get(timeout=30) == 42


def test_a_single_active_consumer_cancelled_hands_over_at_once(conn):
    """The active consumer of an x-single-active-consumer queue cancels while it holds a delivery
    unacked: the waiting one becomes active and is given what is ready at once, as in RabbitMQ,
    not at the queue's next publish or ack."""
    a, b = conn.channel(), conn.channel()
    q = a.queue_declare(unique("sac"), exclusive=True, arguments={"x-single-active-consumer": True}).method.queue
    a.basic_qos(prefetch_count=1)
    b.basic_qos(prefetch_count=1)
    got_a: list[bytes] = []
    got_b: list[bytes] = []
    a.basic_consume(q, lambda ch, m, p, body: got_a.append(body), consumer_tag="first")
    b.basic_consume(q, lambda ch, m, p, body: got_b.append(body), consumer_tag="second")
    for i in range(3):
        a.basic_publish("", q, f"m{i}".encode())
    assert wait_until(lambda: got_a == [b"m0"], conn)
    assert not got_b  # waiting
    a.basic_cancel("first")  # m0 stays unacked on its channel; m1 and m2 are ready
    assert wait_until(lambda: got_b == [b"m1"], conn, timeout=3)
