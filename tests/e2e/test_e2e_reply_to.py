"""Direct reply-to (the ``amq.rabbitmq.reply-to`` pseudo-queue) end to end with unmodified pika,
aio-pika (``aio_pika.patterns.RPC`` answering) and kombu against a real headrace process."""

from __future__ import annotations

import asyncio
import pickle

import pika
import pika.exceptions
import pytest
from e2e_support import unique, wait_until

pytestmark = pytest.mark.timeout(60)

REPLY = "amq.rabbitmq.reply-to"


def responder(ch, queue: str, seen: list) -> None:
    """An RPC server: answers each request on the default exchange with its ``reply_to`` key."""
    ch.queue_declare(queue, exclusive=True)

    def answer(c, method, props, body):
        seen.append(props.reply_to)
        c.basic_publish("", props.reply_to, body.upper(),
                        pika.BasicProperties(correlation_id=props.correlation_id))

    ch.basic_consume(queue, answer, auto_ack=True)


def test_pika_rpc_round_trip_through_direct_reply_to(conn):
    server_ch, client_ch = conn.channel(), conn.channel()
    rpc_q, seen, replies = unique("rpc"), [], []
    responder(server_ch, rpc_q, seen)
    client_ch.basic_consume(REPLY, lambda c, m, p, b: replies.append((m, p, b)), auto_ack=True)
    for i in range(3):
        client_ch.basic_publish("", rpc_q, b"ping-%d" % i,
                                pika.BasicProperties(reply_to=REPLY, correlation_id=str(i)))
    assert wait_until(lambda: len(replies) == 3, conn)
    assert [(p.correlation_id, b) for _, p, b in replies] == [(str(i), b"PING-%d" % i) for i in range(3)]
    assert len(set(seen)) == 1 and seen[0].startswith(REPLY + ".") and len(seen[0]) > len(REPLY) + 8
    method = replies[0][0]
    assert method.exchange == "" and method.routing_key == seen[0]
    # the reply address is a queue as far as a passive declare can tell
    assert client_ch.queue_declare(seen[0], passive=True).method.consumer_count == 1
    assert client_ch.queue_declare(REPLY, passive=True).method.queue == REPLY


def test_server_properties_announce_direct_reply_to(conn):
    assert conn._impl.server_capabilities["direct_reply_to"] is True


def test_publishing_with_reply_to_before_consuming_is_406(conn):
    ch = conn.channel()
    ch.basic_publish("", unique("nobody"), b"x", pika.BasicProperties(reply_to=REPLY))
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.queue_declare(unique("after"), exclusive=True)  # the round trip that sees the close
    assert info.value.reply_code == 406
    assert info.value.reply_text == "PRECONDITION_FAILED - fast reply consumer does not exist"


@pytest.mark.parametrize("second, text", [
    (False, "PRECONDITION_FAILED - reply consumer cannot acknowledge"),
    (True, "PRECONDITION_FAILED - reply consumer already set"),
])
def test_reply_consumer_refusals(conn, second, text):
    ch = conn.channel()
    if second:
        ch.basic_consume(REPLY, lambda *a: None, auto_ack=True)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.basic_consume(REPLY, lambda *a: None, auto_ack=second)
    assert (info.value.reply_code, info.value.reply_text) == (406, text)


def test_reply_to_a_gone_consumer_is_dropped_or_returned(conn):
    client_ch = conn.channel()
    tag = client_ch.basic_consume(REPLY, lambda *a: None, auto_ack=True)
    rpc_q = client_ch.queue_declare(unique("req"), exclusive=True).method.queue
    client_ch.basic_publish("", rpc_q, b"req", pika.BasicProperties(reply_to=REPLY))
    address = client_ch.basic_get(rpc_q, auto_ack=True)[1].reply_to
    assert address.startswith(REPLY + ".")
    client_ch.basic_cancel(tag)

    replier = conn.channel()
    replier.confirm_delivery()
    returned: list = []
    replier.add_on_return_callback(lambda c, m, p, b: returned.append((m.reply_code, m.reply_text, b)))
    replier.basic_publish("", address, b"dropped")  # confirmed, then nowhere
    with pytest.raises(pika.exceptions.UnroutableError):
        replier.basic_publish("", address, b"returned", mandatory=True)
    assert wait_until(lambda: returned, conn)
    assert returned == [(312, "NO_ROUTE", b"returned")]
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        replier.queue_declare(address, passive=True)
    assert info.value.reply_code == 404


def test_mandatory_reply_to_a_live_consumer_is_delivered_and_returned(conn):
    """RabbitMQ 3.10 hands the reply to its consumer and, since it reached no queue, also returns a
    mandatory one (312 NO_ROUTE); with confirms the return comes before the ack."""
    client_ch = conn.channel()
    replies: list = []
    client_ch.basic_consume(REPLY, lambda c, m, p, b: replies.append((m.routing_key, b)), auto_ack=True)
    rpc_q = client_ch.queue_declare(unique("req"), exclusive=True).method.queue
    client_ch.basic_publish("", rpc_q, b"req", pika.BasicProperties(reply_to=REPLY))
    address = client_ch.basic_get(rpc_q, auto_ack=True)[1].reply_to

    replier = conn.channel()
    returned: list = []
    replier.add_on_return_callback(lambda c, m, p, b: returned.append((m.reply_code, m.reply_text,
                                                                       m.routing_key, b)))
    replier.basic_publish("", address, b"plain", mandatory=True)
    assert wait_until(lambda: len(replies) == 1 and len(returned) == 1, conn)
    replier.confirm_delivery()
    with pytest.raises(pika.exceptions.UnroutableError):  # returned, then acked (not nacked)
        replier.basic_publish("", address, b"confirmed", mandatory=True)
    replier.basic_publish("", address, b"not mandatory")  # delivered, confirmed, not returned
    assert wait_until(lambda: len(replies) == 3, conn)
    assert replies == [(address, b"plain"), (address, b"confirmed"), (address, b"not mandatory")]
    assert returned == [(312, "NO_ROUTE", address, b"plain"), (312, "NO_ROUTE", address, b"confirmed")]


def test_reply_consumer_ends_with_its_channel(conn):
    ch = conn.channel()
    ch.basic_consume(REPLY, lambda *a: None, auto_ack=True)
    q = ch.queue_declare(unique("req"), exclusive=True).method.queue
    ch.basic_publish("", q, b"r", pika.BasicProperties(reply_to=REPLY))
    address = ch.basic_get(q, auto_ack=True)[1].reply_to
    ch.close()
    other = conn.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        other.queue_declare(address, passive=True)
    assert info.value.reply_code == 404


def test_aio_pika_rpc_pattern_answers_a_direct_reply_to_caller(broker):
    import aio_pika
    from aio_pika.patterns import RPC

    async def main() -> None:
        server_conn = await aio_pika.connect(broker.url)
        client_conn = await aio_pika.connect(broker.url)
        async with server_conn, client_conn:
            rpc = await RPC.create(await server_conn.channel())
            method = unique("multiply")

            async def multiply(*, x: int, y: int) -> int:
                return x * y

            await rpc.register(method, multiply, auto_delete=True)
            channel = await client_conn.channel()
            replies: asyncio.Queue[aio_pika.abc.AbstractIncomingMessage] = asyncio.Queue()
            reply_queue = await channel.get_queue(REPLY, ensure=False)
            await reply_queue.consume(replies.put, no_ack=True)
            for x in (2, 3):
                await channel.default_exchange.publish(aio_pika.Message(
                    pickle.dumps({"x": x, "y": 7}), reply_to=REPLY, correlation_id=f"c{x}",
                    content_type="application/python-pickle"), routing_key=method)
            got = {}
            for _ in range(2):
                message = await asyncio.wait_for(replies.get(), 5)
                got[message.correlation_id] = pickle.loads(message.body)
            assert got == {"c2": 14, "c3": 21}
            # and the pattern's own caller, on its queue, still works next to it
            assert await rpc.proxy.__getattr__(method)(x=5, y=5) == 25

    asyncio.run(asyncio.wait_for(main(), 30))


def test_kombu_rpc_over_direct_reply_to(broker):
    import kombu

    url = broker.url.replace("amqp://", "pyamqp://")
    rpc_name = unique("kombu-rpc")
    with kombu.Connection(url) as server, kombu.Connection(url) as client:
        server_ch = server.channel()
        requests = kombu.Queue(rpc_name, routing_key=rpc_name, exclusive=True, channel=server_ch)
        requests.declare()

        def handle(body, message):
            kombu.Producer(server_ch).publish(
                {"result": body["n"] * 2}, routing_key=message.properties["reply_to"],
                correlation_id=message.properties["correlation_id"], serializer="json")
            message.ack()

        client_ch = client.channel()
        results: list = []
        reply_queue = kombu.Queue(REPLY, no_ack=True, channel=client_ch)
        with kombu.Consumer(server_ch, [requests], callbacks=[handle]), \
                kombu.Consumer(client_ch, [reply_queue], no_ack=True,
                               callbacks=[lambda body, message: results.append(
                                   (message.properties["correlation_id"], body))]):
            kombu.Producer(client_ch).publish({"n": 21}, routing_key=rpc_name, reply_to=REPLY,
                                              correlation_id="k1", serializer="json")
            server.drain_events(timeout=5)
            client.drain_events(timeout=5)
        assert results == [("k1", {"result": 42})]
