"""RabbitMQ 3.10 behaviours that client libraries' own suites rely on, checked with unmodified pika,
aio-pika and kombu against a real headrace process: unbinding what is gone, the cancel a consumer
gets when its own channel deletes its queue, reserved ``amq.`` names, exclusive redeclares, the
default exchange, and ``original-expiration`` on dead letters."""

from __future__ import annotations

import asyncio

import pika
import pika.exceptions
import pytest
from e2e_support import unique, wait_until

pytestmark = pytest.mark.timeout(60)


def refused(conn: pika.BlockingConnection, action) -> pika.exceptions.ChannelClosedByBroker:
    ch = conn.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        action(ch)
    return info.value


# ---------------------------------------------------------------------- 1. unbind of what is gone
def test_queue_unbind_of_a_deleted_queue_is_unbind_ok(conn, ch):
    q = ch.queue_declare(unique("gone-q")).method.queue
    x = unique("gone-x")
    ch.exchange_declare(x, "direct", auto_delete=False)
    ch.queue_bind(q, x, "k")
    ch.queue_delete(q)
    assert isinstance(ch.queue_unbind(q, x, "k").method, pika.spec.Queue.UnbindOk)
    ch.exchange_delete(x)  # the source gone too: still unbind-ok
    assert isinstance(ch.queue_unbind(q, x, "k").method, pika.spec.Queue.UnbindOk)
    assert ch.is_open


def test_exchange_unbind_of_a_deleted_exchange_is_unbind_ok(conn, ch):
    src, dst = unique("src-x"), unique("dst-x")
    ch.exchange_declare(src, "topic")
    ch.exchange_declare(dst, "fanout")
    ch.exchange_bind(dst, src, "a.#")
    ch.exchange_delete(dst)
    assert isinstance(ch.exchange_unbind(dst, src, "a.#").method, pika.spec.Exchange.UnbindOk)
    ch.exchange_delete(src)
    assert isinstance(ch.exchange_unbind(dst, src, "a.#").method, pika.spec.Exchange.UnbindOk)
    # the default exchange stays refused, gone or not
    err = refused(conn, lambda c: c.queue_unbind("anything", "", "k"))
    assert err.reply_code == 403


# ---------------------------------------------------------------------- 2. cancel after delete-ok
@pytest.mark.parametrize("kind", ["plain", "auto_delete", "exclusive"])
def test_consumer_on_the_deleting_channel_gets_cancel_after_delete_ok(conn, ch, kind):
    q = ch.queue_declare(unique(f"del-{kind}"), auto_delete=kind == "auto_delete",
                         exclusive=kind == "exclusive").method.queue
    order: list[str] = []
    ch.add_on_cancel_callback(lambda frame: order.append("cancel:" + frame.method.consumer_tag))
    tag = ch.basic_consume(q, lambda *a: None, auto_ack=True)
    ch.queue_delete(q)
    order.append("delete-ok")
    assert wait_until(lambda: len(order) == 2, conn)
    assert order == ["delete-ok", "cancel:" + tag]
    assert tag not in ch.consumer_tags
    assert ch.is_open


def test_aio_pika_consumer_sees_its_own_queue_deleted(broker):
    import aio_pika

    async def main() -> None:
        connection = await aio_pika.connect(broker.url)
        async with connection:
            channel = await connection.channel()
            queue = await channel.declare_queue(unique("aio-del"), auto_delete=True)
            cancels: asyncio.Queue[str] = asyncio.Queue()
            raw = await channel.get_underlay_channel()
            raw.on_consumer_cancel_callbacks.add(lambda frame: cancels.put_nowait(frame.consumer_tag))
            async def ignore(message: aio_pika.abc.AbstractIncomingMessage) -> None:
                return None

            tag = await queue.consume(ignore, no_ack=True)
            await queue.delete(if_unused=False)
            assert await asyncio.wait_for(cancels.get(), 5) == tag
            assert tag not in raw.consumers and not channel.is_closed

    asyncio.run(asyncio.wait_for(main(), 20))


# ---------------------------------------------------------------------- 5. reserved names
def test_active_declare_of_an_existing_amq_queue_is_access_refused(conn, ch):
    q = ch.queue_declare("", exclusive=True).method.queue
    assert q.startswith("amq.gen-")
    assert ch.queue_declare(q, passive=True).method.queue == q  # passive is fine
    err = refused(conn, lambda c: c.queue_declare(q, exclusive=True))
    assert err.reply_code == 403
    assert err.reply_text == f"ACCESS_REFUSED - queue name '{q}' contains reserved prefix 'amq.*'"


# ---------------------------------------------------------------------- 6. exclusive redeclare
def test_exclusive_redeclare_ignores_durable(broker, conn, ch, http):
    q = unique("excl-durable")
    ch.queue_declare(q, exclusive=True, durable=True)
    assert ch.queue_declare(q, exclusive=True, durable=False).method.queue == q
    assert ch.queue_declare(q, exclusive=True, durable=True).method.queue == q
    assert http.get(f"/api/queues/%2F/{q}").json()["durable"] is False  # as RabbitMQ lists it


def test_aio_pika_exclusive_redeclare_with_other_durable(broker):
    import aio_pika

    async def main() -> None:
        connection = await aio_pika.connect(broker.url)
        async with connection:
            channel = await connection.channel()
            name = unique("aio-excl")
            await channel.declare_queue(name, exclusive=True, durable=False)
            again = await channel.declare_queue(name, exclusive=True, durable=True)
            assert again.name == name and not channel.is_closed

    asyncio.run(asyncio.wait_for(main(), 20))


# ---------------------------------------------------------------------- 7. the default exchange
@pytest.mark.parametrize("passive", [True, False])
def test_declare_of_the_default_exchange_is_access_refused(conn, passive):
    err = refused(conn, lambda c: c.exchange_declare("", "direct", passive=passive))
    assert err.reply_code == 403
    assert err.reply_text == "ACCESS_REFUSED - operation not permitted on the default exchange"


# ---------------------------------------------------------------------- 9. original-expiration
def test_kombu_dead_letter_keeps_original_expiration_in_x_death(broker):
    import kombu

    source, target = unique("ttl-src"), unique("ttl-dlq")
    with kombu.Connection(broker.url.replace("amqp://", "pyamqp://")) as connection:
        channel = connection.channel()
        dlq = kombu.Queue(target, routing_key=target, channel=channel)
        dlq.declare()
        src = kombu.Queue(source, routing_key=source, channel=channel, queue_arguments={
            "x-dead-letter-exchange": "", "x-dead-letter-routing-key": target})
        src.declare()
        kombu.Producer(channel).publish({"n": 1}, routing_key=source, expiration=0.05)
        got: list[kombu.Message] = []
        with kombu.Consumer(channel, [dlq], callbacks=[lambda body, message: got.append(message)],
                            no_ack=True):
            connection.drain_events(timeout=5)
        message = got[0]
        assert "expiration" not in message.properties
        death = message.headers["x-death"][0]
        assert death["reason"] == "expired" and death["queue"] == source
        assert death["original-expiration"] == "50"
        channel.close()


def test_pika_rejected_message_with_expiration_loses_it(conn, ch):
    source, target = unique("rej-src"), unique("rej-dlq")
    ch.queue_declare(target, exclusive=True)
    ch.queue_declare(source, exclusive=True, arguments={"x-dead-letter-exchange": "",
                                                         "x-dead-letter-routing-key": target})
    ch.basic_publish("", source, b"x", pika.BasicProperties(expiration="60000"))
    got = []
    ch.basic_consume(source, lambda c, m, p, b: c.basic_reject(m.delivery_tag, requeue=False))
    ch.basic_consume(target, lambda c, m, p, b: got.append(p), auto_ack=True)
    assert wait_until(lambda: got, conn)
    assert got[0].expiration is None
    assert got[0].headers["x-death"][0]["original-expiration"] == "60000"
    assert got[0].headers["x-death"][0]["reason"] == "rejected"


# ---------------------------------------------------------------------- connection and channel names
def test_connections_and_channels_are_named_as_rabbitmq_names_them_and_found_by_that_name(broker, http):
    """``peer -> listener`` and ``<connection> (<number>)`` (RabbitMQ 3.10's ``rabbitmqctl
    list_connections name`` gives ``127.0.0.1:39884 -> 127.0.0.1:5672``): tools that look up or
    close a connection by the name they built from its addresses find it."""
    from urllib.parse import quote, urlsplit

    label = unique("named")
    params = pika.URLParameters(broker.url)
    params.client_properties = {"connection_name": label}
    conn = pika.BlockingConnection(params)
    conn.channel()
    listener = urlsplit(broker.url).port
    def ours() -> list[dict]:
        return [c for c in http.get("/api/connections").json()
                if c["client_properties"].get("connection_name") == label]

    assert wait_until(lambda: bool(ours()))
    (row,) = ours()
    assert (row["host"], row["port"]) == ("127.0.0.1", listener)
    name = f"{row['peer_host']}:{row['peer_port']} -> 127.0.0.1:{listener}"
    assert row["name"] == name
    (channel,) = http.get(f"/api/connections/{quote(name, safe='')}/channels").json()
    assert channel["name"] == f"{name} (1)" and channel["connection_details"]["name"] == name
    assert http.get(f"/api/channels/{quote(channel['name'], safe='')}").json()["number"] == 1
    assert http.delete(f"/api/connections/{quote(name, safe='')}").status_code == 204
    with pytest.raises(pika.exceptions.ConnectionClosed):
        for _ in range(50):
            conn.process_data_events(time_limit=0.1)
