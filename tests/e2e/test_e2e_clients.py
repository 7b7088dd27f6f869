"""aio-pika, kombu and celery, unmodified, against a real headrace process."""

from __future__ import annotations

import asyncio

import pytest
from e2e_support import celery_worker, unique

pytestmark = pytest.mark.timeout(90)


def test_aio_pika_publish_consume_ack_and_confirms(broker):
    import aio_pika

    async def main() -> list[bytes]:
        connection = await aio_pika.connect_robust(broker.url)
        async with connection:
            channel = await connection.channel(publisher_confirms=True)
            await channel.set_qos(prefetch_count=5)
            exchange = await channel.declare_exchange(unique("aio"), aio_pika.ExchangeType.TOPIC,
                                                      auto_delete=True)
            queue = await channel.declare_queue(unique("aioq"), exclusive=True)
            await queue.bind(exchange, "orders.#")
            for i in range(20):
                await exchange.publish(aio_pika.Message(b"order-%d" % i, message_id=str(i)),
                                       routing_key=f"orders.eu.{i}")
            await exchange.publish(aio_pika.Message(b"ignored"), routing_key="invoices.eu")
            got = []
            async with queue.iterator() as it:
                async for message in it:
                    async with message.process():
                        got.append(message.body)
                    if len(got) == 20:
                        break
            return got

    got = asyncio.run(asyncio.wait_for(main(), 30))
    assert got == [b"order-%d" % i for i in range(20)]


def test_aio_pika_nack_requeue_redelivers(broker):
    import aio_pika

    async def main() -> tuple[bool, bool]:
        connection = await aio_pika.connect(broker.url)
        async with connection:
            channel = await connection.channel()
            queue = await channel.declare_queue(unique("aioq"), exclusive=True)
            await channel.default_exchange.publish(aio_pika.Message(b"again"), routing_key=queue.name)
            first = await queue.get(timeout=5)
            await first.nack(requeue=True)
            second = await queue.get(timeout=5)
            await second.ack()
            return first.redelivered, second.redelivered

    assert asyncio.run(asyncio.wait_for(main(), 30)) == (False, True)


def test_kombu_producer_consumer_topic(broker):
    from kombu import Connection, Consumer, Exchange, Producer, Queue

    exchange = Exchange(unique("kx"), type="topic", durable=False, auto_delete=True)
    queue = Queue(unique("kq"), exchange, routing_key="news.*", exclusive=True)
    received: list[dict] = []
    with Connection(broker.url.replace("amqp://", "pyamqp://")) as conn:
        with conn.channel() as channel:
            consumer = Consumer(channel, [queue], callbacks=[lambda body, msg: (received.append(body), msg.ack())],
                                accept=["json"])
            consumer.consume()
            producer = Producer(channel, exchange=exchange, serializer="json")
            producer.publish({"n": 1}, routing_key="news.sport", declare=[queue])
            producer.publish({"n": 2}, routing_key="news.sport.extra")
            producer.publish({"n": 3}, routing_key="news.world")
            while len(received) < 2:
                conn.drain_events(timeout=5)
            consumer.cancel()
    assert received == [{"n": 1}, {"n": 3}]


def test_kombu_simple_queue_get_put(broker):
    from kombu import Connection

    name = unique("simple")
    with Connection(broker.url.replace("amqp://", "pyamqp://")) as conn:
        q = conn.SimpleQueue(name)
        q.put({"hello": "world"})
        msg = q.get(block=True, timeout=5)
        assert msg.payload == {"hello": "world"}
        msg.ack()
        q.close()
        # deleting a queue that this channel still consumes would cancel the consumer first
        # (basic.cancel from the broker, as RabbitMQ does), so delete it after the close
        with conn.channel() as channel:
            channel.queue_delete(name)


def test_celery_worker_subprocess_runs_tasks_with_rpc_results(broker, tmp_path):
    with celery_worker(broker.url, unique("celery"), tmp_path) as app:
        results = [app.send_task("e2e.add", (i, i)) for i in range(5)]
        assert [r.get(timeout=30) for r in results] == [0, 2, 4, 6, 8]
