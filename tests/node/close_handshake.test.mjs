// How a connection ends, with amqplib: a close sent while a burst of publishes is still buffered
// gets close-ok (no ECONNRESET), a server-initiated close reaches a busy client as connection.close,
// and an exclusive queue is free again the moment its connection's socket is destroyed without a
// connection.close.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import amqp from 'amqplib';
import { HTTP_URL, URL, unique, within, withConnection } from './support.mjs';

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

test('a server-initiated close reaches a busy client as connection.close, not a reset', async () => {
  const conn = await amqp.connect(URL);
  const errors = [];
  conn.on('error', (err) => errors.push(err));
  const closed = new Promise((resolve) => conn.on('close', resolve));
  const ch = await conn.createChannel();
  const { queue } = await ch.assertQueue(unique('node-forced'), { exclusive: true });
  const port = conn.connection.stream.localPort;
  const auth = `Basic ${Buffer.from('guest:guest').toString('base64')}`;
  const listed = await (await fetch(`${HTTP_URL}/api/connections`, { headers: { authorization: auth } })).json();
  const mine = listed.find((c) => c.peer_port === port);
  assert.ok(mine, 'the connection is listed');
  const body = Buffer.alloc(64 * 1024, 'y');
  for (let i = 0; i < 200; i += 1) {
    ch.sendToQueue(queue, body);  // still being written when the broker closes
  }
  const answer = await fetch(`${HTTP_URL}/api/connections/${encodeURIComponent(mine.name)}`,
    { method: 'DELETE', headers: { authorization: auth } });
  assert.equal(answer.status, 204);
  const reason = await within(closed, 5000, 'close');
  // amqplib reports a 320 close as the 'close' event's reason; a reset socket would be an 'error'
  assert.deepEqual(errors.map(String), []);
  assert.equal(reason.code, 320);
  assert.match(reason.message, /CONNECTION_FORCED/);
});
