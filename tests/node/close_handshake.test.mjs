// How a connection ends, with amqplib: a close sent while a burst of publishes is still buffered
// gets close-ok (no ECONNRESET), and an exclusive queue is free again the moment its connection's
// socket is destroyed without a connection.close.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import amqp from 'amqplib';
import { URL, unique, within, withConnection } from './support.mjs';

test('close right behind a burst of publishes resolves with close-ok', async () => {
  const conn = await amqp.connect(URL);
  const errors = [];
  conn.on('error', (err) => errors.push(err));
  const ch = await conn.createChannel();
  const { queue } = await ch.assertQueue(unique('node-burst'), { durable: false });
  const body = Buffer.alloc(4000, 'x');
  for (let i = 0; i < 2000; i += 1) ch.sendToQueue(queue, body);
  // amqplib writes connection.close on channel 0 ahead of channel 1's queued publishes; the broker
  // discards those (as RabbitMQ does) and must not reset the socket while they are in flight
  await within(conn.close(), 10000, 'close-ok');
  assert.deepEqual(errors, []);
  await withConnection(async (again) => {
    await (await again.createChannel()).deleteQueue(queue);
  });
});

test('an exclusive queue is free as soon as its socket is destroyed', async () => {
  const name = unique('node-exclusive');
  const first = await amqp.connect(`${URL}?heartbeat=0`); // no heartbeat timer outlives the socket
  first.on('error', () => {});
  await (await first.createChannel()).assertQueue(name, { exclusive: true });
  first.connection.stream.destroy(); // no connection.close: the TCP connection just ends
  await withConnection(async (conn) => {
    const ch = await conn.createChannel();
    assert.equal((await ch.assertQueue(name, { exclusive: true })).queue, name); // no 405
  });
});
