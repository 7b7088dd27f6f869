"""Transactions apply all of themselves or nothing, and acks, nacks and rejects follow RabbitMQ's
delivery-tag rules: each case as a pika client meets it, compared with what RabbitMQ 3.10 does."""

from __future__ import annotations

import pika
import pytest
from e2e_support import unique

pytestmark = pytest.mark.timeout(30)


def _fill(conn: pika.BlockingConnection, count: int) -> str:
    ch = conn.channel()
    q = ch.queue_declare(unique("txq")).method.queue
    for i in range(count):
        ch.basic_publish("", q, f"m{i}".encode())
    ch.close()
    return q


def _get_all(ch, q: str, count: int) -> list[int]:
    tags = []
    for _ in range(count):
        method, _, _ = ch.basic_get(q)
        assert method is not None
        tags.append(method.delivery_tag)
    return tags


def _ready(conn: pika.BlockingConnection, q: str) -> int:
    ch = conn.channel()
    count = ch.queue_declare(q, passive=True).method.message_count
    ch.close()
    return count


def _closed_by_broker(call) -> pika.exceptions.ChannelClosedByBroker:
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        call()
    return info.value


# ---------------------------------------------------------------------------- transactions
def test_a_publish_to_a_missing_exchange_closes_the_channel_and_applies_none_of_the_transaction(conn):
    q = _fill(conn, 0)
    ch = conn.channel()
    ch.tx_select()
    ch.basic_publish("", q, b"first")
    ch.basic_publish(unique("missing"), "k", b"second")
    error = _closed_by_broker(ch.tx_commit)
    assert error.reply_code == 404 and error.reply_text.startswith("NOT_FOUND - no exchange 'missing-")
    assert _ready(conn, q) == 0  # the first publish went with the transaction


def test_an_exchange_deleted_before_commit_fails_the_commit_with_nothing_applied(conn):
    q = _fill(conn, 0)
    admin = conn.channel()
    exchange = unique("txx")
    admin.exchange_declare(exchange, "fanout")
    admin.queue_bind(q, exchange)
    ch = conn.channel()
    ch.tx_select()
    ch.basic_publish("", q, b"direct")
    ch.basic_publish(exchange, "", b"through the exchange")
    ch.queue_declare(q, passive=True)  # both publishes were taken before the delete
    admin.exchange_delete(exchange)
    error = _closed_by_broker(ch.tx_commit)
    assert error.reply_code == 404
    assert _ready(conn, q) == 0


def test_acking_one_tag_twice_in_a_transaction_is_406_and_keeps_every_message(conn):
    q = _fill(conn, 5)
    ch = conn.channel()
    tags = _get_all(ch, q, 5)
    ch.tx_select()
    ch.basic_ack(tags[0])
    ch.basic_ack(tags[0])
    error = _closed_by_broker(ch.tx_commit)
    assert (error.reply_code, error.reply_text) == (406, f"PRECONDITION_FAILED - unknown delivery tag {tags[0]}")
    assert _ready(conn, q) == 5  # the channel's close requeued all five, the held ack with them


def test_an_ack_then_a_multiple_ack_over_it_in_a_transaction_is_406(conn):
    q = _fill(conn, 3)
    ch = conn.channel()
    tags = _get_all(ch, q, 3)
    ch.tx_select()
    ch.basic_ack(tags[1], multiple=True)
    ch.basic_nack(tags[0], requeue=False)  # already taken by the multiple ack above
    error = _closed_by_broker(ch.tx_commit)
    assert error.reply_code == 406
    assert _ready(conn, q) == 3


def test_rollback_gives_the_acked_deliveries_back_and_commit_applies_publishes_and_acks(conn):
    q = _fill(conn, 3)
    out = _fill(conn, 0)
    ch = conn.channel()
    tags = _get_all(ch, q, 3)
    ch.tx_select()
    ch.basic_ack(tags[1], multiple=True)
    ch.basic_publish("", out, b"rolled back")
    ch.tx_rollback()
    assert _ready(conn, out) == 0
    ch.basic_ack(tags[1], multiple=True)  # unacked again after the rollback
    ch.basic_publish("", out, b"committed")
    ch.basic_reject(tags[2], requeue=True)
    assert _ready(conn, q) == 0 and _ready(conn, out) == 0  # nothing before the commit
    ch.tx_commit()
    assert _ready(conn, out) == 1
    assert _ready(conn, q) == 1  # the rejected one, requeued; the two acked are gone
    ch.close()
    assert _ready(conn, q) == 1


def test_a_closed_transactional_channel_requeues_what_its_transaction_acked(conn):
    q = _fill(conn, 4)
    ch = conn.channel()
    tags = _get_all(ch, q, 4)
    ch.tx_select()
    ch.basic_ack(0, multiple=True)
    ch.close()
    assert _ready(conn, q) == 4
    ch = conn.channel()
    method, _, _ = ch.basic_get(q, auto_ack=True)
    assert method.redelivered and tags


# ---------------------------------------------------------------------------- delivery tags
def test_a_multiple_ack_of_an_acked_tag_is_406_and_the_earlier_deliveries_come_back(conn):
    q = _fill(conn, 3)
    ch = conn.channel()
    tags = _get_all(ch, q, 3)
    ch.basic_ack(tags[2])
    ch.basic_ack(tags[2], multiple=True)
    error = _closed_by_broker(lambda: ch.queue_declare(q, passive=True))
    assert (error.reply_code, error.reply_text) == (406, f"PRECONDITION_FAILED - unknown delivery tag {tags[2]}")
    check = conn.channel()
    bodies = []
    for _ in range(2):
        method, _, body = check.basic_get(q, auto_ack=True)
        assert method.redelivered
        bodies.append(body)
    assert bodies == [b"m0", b"m1"] and check.basic_get(q)[0] is None


@pytest.mark.parametrize("settle", [
    pytest.param(lambda ch, tag: ch.basic_ack(tag + 10), id="ack-unknown"),
    pytest.param(lambda ch, tag: ch.basic_ack(tag + 10, multiple=True), id="ack-multiple-unknown"),
    pytest.param(lambda ch, tag: ch.basic_nack(tag + 10, multiple=True), id="nack-multiple-unknown"),
    pytest.param(lambda ch, tag: ch.basic_reject(tag + 10), id="reject-unknown"),
    pytest.param(lambda ch, tag: ch.basic_ack(0), id="ack-zero-single"),
    pytest.param(lambda ch, tag: ch.basic_nack(0, multiple=False), id="nack-zero-single"),
])
def test_a_settlement_of_an_unknown_tag_is_406_and_settles_nothing(conn, settle):
    q = _fill(conn, 2)
    ch = conn.channel()
    tags = _get_all(ch, q, 2)
    settle(ch, tags[-1])
    error = _closed_by_broker(lambda: ch.queue_declare(q, passive=True))
    assert error.reply_code == 406 and error.reply_text.startswith("PRECONDITION_FAILED - unknown delivery tag")
    assert _ready(conn, q) == 2


def test_nack_of_tag_zero_with_multiple_requeues_every_delivery(conn):
    q = _fill(conn, 3)
    ch = conn.channel()
    _get_all(ch, q, 3)
    ch.basic_nack(0, multiple=True, requeue=True)
    assert _ready(conn, q) == 3
    ch.basic_ack(0, multiple=True)  # nothing unacked: no error, as RabbitMQ
    assert ch.queue_declare(q, passive=True).method.message_count == 3
