"""aio-pika, kombu and celery, unmodified, against a real headrace process."""

from __future__ import annotations

import asyncio
import uuid

import pytest

pytestmark = pytest.mark.timeout(90)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


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
        q.queue.delete()
        q.close()


def test_celery_task_roundtrip_with_rpc_results(broker):
    from celery import Celery
    from celery.contrib.testing.worker import start_worker

    queue = unique("celery")
    app = Celery("headrace_e2e", broker=broker.url.replace("amqp://", "pyamqp://"), backend="rpc://")
    app.conf.update(task_default_queue=queue, broker_connection_retry_on_startup=False,
                    worker_hijack_root_logger=False, result_expires=60)

    @app.task(name="e2e.add")
    def add(x: int, y: int) -> int:
        return x + y

    with start_worker(app, pool="solo", perform_ping_check=False, loglevel="WARNING", shutdown_timeout=10):
        results = [add.delay(i, i) for i in range(5)]
        assert [r.get(timeout=20) for r in results] == [0, 2, 4, 6, 8]
