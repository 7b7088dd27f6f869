"""Unmodified pika against a real headrace process: routing, acks, prefetch, confirms, errors."""

from __future__ import annotations

import pika
import pika.exceptions
import pytest
from e2e_support import unique, wait_until

pytestmark = pytest.mark.timeout(60)


def drain(ch, queue: str, expected: int, timeout: float = 5) -> list[tuple]:
    """Consume ``expected`` messages (auto-ack) or fail after ``timeout`` seconds of inactivity."""
    got = []
    for method, props, body in ch.consume(queue, auto_ack=True, inactivity_timeout=timeout):
        if method is None:
            break
        got.append((method, props, body))
        if len(got) == expected:
            break
    ch.cancel()
    return got


def test_publish_to_default_exchange_and_get(ch):
    q = ch.queue_declare(unique("q")).method.queue
    ch.basic_publish("", q, b"hello", pika.BasicProperties(content_type="text/plain", headers={"a": 1}))
    method, props, body = ch.basic_get(q, auto_ack=True)
    assert body == b"hello"
    assert props.content_type == "text/plain"
    assert props.headers == {"a": 1}
    assert method.routing_key == q and method.exchange == ""
    assert ch.basic_get(q) == (None, None, None)


def test_server_named_queue_and_declare_ok_counts(ch):
    q = ch.queue_declare("", exclusive=True).method.queue
    assert q.startswith("amq.gen-")
    for i in range(3):
        ch.basic_publish("", q, b"x%d" % i)
    ok = ch.queue_declare(q, passive=True).method
    assert ok.message_count == 3 and ok.consumer_count == 0


def test_direct_fanout_topic_headers_routing(ch):
    tag = unique("r")
    queues = {name: ch.queue_declare(f"{tag}-{name}", exclusive=True).method.queue
              for name in ("d", "f1", "f2", "t1", "t2", "h")}
    ch.exchange_declare(f"{tag}-direct", "direct")
    ch.exchange_declare(f"{tag}-fanout", "fanout")
    ch.exchange_declare(f"{tag}-topic", "topic")
    ch.exchange_declare(f"{tag}-headers", "headers")
    ch.queue_bind(queues["d"], f"{tag}-direct", "key")
    ch.queue_bind(queues["f1"], f"{tag}-fanout")
    ch.queue_bind(queues["f2"], f"{tag}-fanout")
    ch.queue_bind(queues["t1"], f"{tag}-topic", "stock.*.nyse")
    ch.queue_bind(queues["t2"], f"{tag}-topic", "stock.#")
    ch.queue_bind(queues["h"], f"{tag}-headers", arguments={"x-match": "any", "a": 1, "b": 2})

    ch.basic_publish(f"{tag}-direct", "key", b"d")
    ch.basic_publish(f"{tag}-direct", "other", b"lost")
    ch.basic_publish(f"{tag}-fanout", "whatever", b"f")
    ch.basic_publish(f"{tag}-topic", "stock.ibm.nyse", b"t-both")
    ch.basic_publish(f"{tag}-topic", "stock", b"t-hash-only")
    ch.basic_publish(f"{tag}-headers", "", b"h", pika.BasicProperties(headers={"b": 2}))
    ch.basic_publish(f"{tag}-headers", "", b"no", pika.BasicProperties(headers={"b": 3}))

    def bodies(q):
        out = []
        while True:
            method, _, body = ch.basic_get(q, auto_ack=True)
            if method is None:
                return out
            out.append(body)

    assert bodies(queues["d"]) == [b"d"]
    assert bodies(queues["f1"]) == [b"f"] and bodies(queues["f2"]) == [b"f"]
    assert bodies(queues["t1"]) == [b"t-both"]
    assert bodies(queues["t2"]) == [b"t-both", b"t-hash-only"]
    assert bodies(queues["h"]) == [b"h"]


def test_exchange_to_exchange_binding_and_alternate_exchange(ch):
    tag = unique("e2e")
    ch.exchange_declare(f"{tag}-ae", "fanout")
    ch.exchange_declare(f"{tag}-src", "direct", arguments={"alternate-exchange": f"{tag}-ae"})
    ch.exchange_declare(f"{tag}-dst", "fanout")
    ch.exchange_bind(f"{tag}-dst", f"{tag}-src", "k")
    q_dst = ch.queue_declare(f"{tag}-dq", exclusive=True).method.queue
    q_ae = ch.queue_declare(f"{tag}-aq", exclusive=True).method.queue
    ch.queue_bind(q_dst, f"{tag}-dst")
    ch.queue_bind(q_ae, f"{tag}-ae")
    ch.basic_publish(f"{tag}-src", "k", b"via-e2e")
    ch.basic_publish(f"{tag}-src", "nomatch", b"via-ae")
    assert ch.basic_get(q_dst, auto_ack=True)[2] == b"via-e2e"
    assert ch.basic_get(q_ae, auto_ack=True)[2] == b"via-ae"
    assert ch.basic_get(q_dst)[0] is None


def test_nack_requeue_comes_back_redelivered_in_original_position(ch):
    q = ch.queue_declare(unique("q"), exclusive=True).method.queue
    for i in range(3):
        ch.basic_publish("", q, b"m%d" % i)
    m0 = ch.basic_get(q)[0]
    m1 = ch.basic_get(q)[0]
    ch.basic_nack(m0.delivery_tag, requeue=True)
    method, _, body = ch.basic_get(q)
    assert body == b"m0" and method.redelivered
    ch.basic_reject(m1.delivery_tag, requeue=True)
    method2, _, body2 = ch.basic_get(q)
    assert body2 == b"m1" and method2.redelivered
    method3, _, body3 = ch.basic_get(q)
    assert body3 == b"m2" and not method3.redelivered
    ch.basic_ack(method3.delivery_tag, multiple=True)
    assert ch.queue_declare(q, passive=True).method.message_count == 0


def test_prefetch_limits_unacked_and_ack_releases_more(conn, ch):
    q = ch.queue_declare(unique("q"), exclusive=True).method.queue
    for i in range(10):
        ch.basic_publish("", q, b"%d" % i)
    ch.basic_qos(prefetch_count=3)
    received = []
    ch.basic_consume(q, lambda c, m, p, b: received.append(m))
    assert wait_until(lambda: len(received) >= 3, conn)
    conn.channel().close()  # a round trip: a 4th delivery would have arrived before its reply
    conn.process_data_events(time_limit=0)
    assert len(received) == 3
    ch.basic_ack(received[-1].delivery_tag, multiple=True)
    assert wait_until(lambda: len(received) >= 6, conn)
    conn.channel().close()
    conn.process_data_events(time_limit=0)
    assert len(received) == 6


def test_closing_channel_returns_unacked_with_redelivered(conn):
    ch1 = conn.channel()
    q = ch1.queue_declare(unique("q")).method.queue
    ch1.basic_publish("", q, b"once")
    method, _, _ = ch1.basic_get(q)
    assert not method.redelivered
    ch1.close()
    ch2 = conn.channel()
    method, _, body = ch2.basic_get(q, auto_ack=True)
    assert body == b"once" and method.redelivered
    ch2.queue_delete(q)


def test_connection_loss_returns_unacked(broker):
    c1 = pika.BlockingConnection(pika.URLParameters(broker.url))
    ch1 = c1.channel()
    q = ch1.queue_declare(unique("q")).method.queue
    ch1.basic_publish("", q, b"crashy")
    assert ch1.basic_get(q)[2] == b"crashy"
    c1._impl._transport._sock.close()  # abrupt: no connection.close
    c2 = pika.BlockingConnection(pika.URLParameters(broker.url))
    ch2 = c2.channel()
    got = drain(ch2, q, 1)
    assert got and got[0][2] == b"crashy" and got[0][0].redelivered
    ch2.queue_delete(q)
    c2.close()


def test_round_robin_between_two_consumers(conn, ch):
    q = ch.queue_declare(unique("q"), exclusive=True).method.queue
    seen: dict[str, list[bytes]] = {"a": [], "b": []}
    ch.basic_consume(q, lambda c, m, p, b: seen["a"].append(b), auto_ack=True, consumer_tag="a")
    ch.basic_consume(q, lambda c, m, p, b: seen["b"].append(b), auto_ack=True, consumer_tag="b")
    for i in range(10):
        ch.basic_publish("", q, b"%d" % i)
    while len(seen["a"]) + len(seen["b"]) < 10:
        conn.process_data_events(time_limit=1)
    assert len(seen["a"]) == 5 and len(seen["b"]) == 5


def test_publisher_confirms_and_mandatory_return(ch):
    ch.confirm_delivery()
    q = ch.queue_declare(unique("q"), exclusive=True).method.queue
    ch.basic_publish("", q, b"ok", mandatory=True)  # raises if nacked
    with pytest.raises(pika.exceptions.UnroutableError):
        ch.basic_publish("", unique("nowhere"), b"lost", mandatory=True)
    assert ch.queue_declare(q, passive=True).method.message_count == 1


def test_reject_publish_overflow_nacks_confirm(ch):
    ch.confirm_delivery()
    q = ch.queue_declare(unique("q"), exclusive=True,
                         arguments={"x-max-length": 1, "x-overflow": "reject-publish"}).method.queue
    ch.basic_publish("", q, b"first")
    with pytest.raises(pika.exceptions.NackError):
        ch.basic_publish("", q, b"second")


def test_missing_queue_closes_channel_with_404(conn):
    ch = conn.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.queue_declare(unique("absent"), passive=True)
    assert info.value.reply_code == 404
    assert "NOT_FOUND - no queue" in info.value.reply_text
    assert conn.is_open  # the connection survives a channel error
    assert conn.channel().is_open


def test_inequivalent_redeclare_is_406(conn):
    ch = conn.channel()
    name = unique("x")
    ch.exchange_declare(name, "direct")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.exchange_declare(name, "fanout")
    assert info.value.reply_code == 406
    conn.channel().exchange_delete(name)


def test_unknown_delivery_tag_is_406(conn):
    ch = conn.channel()
    ch.basic_ack(999)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.queue_declare(unique("q"), exclusive=True)
    assert info.value.reply_code == 406


def test_exclusive_queue_is_locked_for_other_connections(broker, ch):
    q = ch.queue_declare(unique("q"), exclusive=True).method.queue
    other = pika.BlockingConnection(pika.URLParameters(broker.url))
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        other.channel().basic_consume(q, lambda *a: None)
    assert info.value.reply_code == 405
    other.close()


def test_exclusive_queue_deleted_with_its_connection(broker):
    c1 = pika.BlockingConnection(pika.URLParameters(broker.url))
    q = c1.channel().queue_declare(unique("q"), exclusive=True).method.queue
    c1.close()
    c2 = pika.BlockingConnection(pika.URLParameters(broker.url))
    with pytest.raises(pika.exceptions.ChannelClosedByBroker):
        c2.channel().queue_declare(q, passive=True)
    c2.close()


def test_consumer_cancel_notification_on_queue_delete(conn, ch):
    q = ch.queue_declare(unique("q")).method.queue
    cancelled = []
    ch.add_on_cancel_callback(lambda frame: cancelled.append(frame.method.consumer_tag))
    tag = ch.basic_consume(q, lambda *a: None)
    conn.channel().queue_delete(q)
    assert wait_until(lambda: cancelled, conn)
    assert cancelled == [tag]


def test_dead_letter_on_reject_and_ttl(ch):
    tag = unique("dlx")
    ch.exchange_declare(tag, "fanout")
    dlq = ch.queue_declare(f"{tag}-dlq", exclusive=True).method.queue
    ch.queue_bind(dlq, tag)
    q = ch.queue_declare(f"{tag}-q", exclusive=True, arguments={"x-dead-letter-exchange": tag}).method.queue
    ch.basic_publish("", q, b"rejected")
    method, _, _ = ch.basic_get(q)
    ch.basic_reject(method.delivery_tag, requeue=False)
    ttl = ch.queue_declare(f"{tag}-ttl", exclusive=True,
                           arguments={"x-dead-letter-exchange": tag, "x-message-ttl": 50}).method.queue
    ch.basic_publish("", ttl, b"expired")
    got = drain(ch, dlq, 2)
    assert [g[2] for g in got] == [b"rejected", b"expired"]
    deaths = [g[1].headers["x-death"][0] for g in got]
    assert [d["reason"] for d in deaths] == ["rejected", "expired"]
    assert deaths[0]["queue"] == q and deaths[0]["count"] == 1


def test_transactions_commit_and_rollback(conn, ch):
    q = ch.queue_declare(unique("q"), exclusive=True).method.queue
    ch.tx_select()
    ch.basic_publish("", q, b"rolled-back")
    ch.tx_rollback()
    ch.basic_publish("", q, b"committed")
    assert ch.queue_declare(q, passive=True).method.message_count == 0
    ch.tx_commit()
    assert ch.queue_declare(q, passive=True).method.message_count == 1


def test_purge_and_delete_report_counts(ch):
    q = ch.queue_declare(unique("q")).method.queue
    for _ in range(4):
        ch.basic_publish("", q, b"x")
    assert ch.queue_purge(q).method.message_count == 4
    ch.basic_publish("", q, b"y")
    assert ch.queue_delete(q).method.message_count == 1


def test_wrong_password_is_refused(broker):
    params = pika.URLParameters(f"amqp://guest:wrong@127.0.0.1:{broker.amqp_port}/%2F")
    with pytest.raises(pika.exceptions.ProbableAuthenticationError):
        pika.BlockingConnection(params)


def test_unknown_vhost_is_refused(broker):
    params = pika.URLParameters(f"amqp://guest:guest@127.0.0.1:{broker.amqp_port}/nope")
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError):
        pika.BlockingConnection(params)


def test_large_message_split_across_frames(ch):
    q = ch.queue_declare(unique("q"), exclusive=True).method.queue
    body = bytes(range(256)) * 4096  # 1 MiB > frame_max
    ch.basic_publish("", q, body)
    assert ch.basic_get(q, auto_ack=True)[2] == body
