// The close handshake as RabbitMQ does it: a client that closes with publishes still buffered
// behind its connection.close gets close-ok (amqplib's close() resolves), not a reset socket.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import amqp from 'amqplib';
import { HTTP_URL, URL, unique, within } from './support.mjs';

test('close() with buffered publishes resolves with close-ok', async () => {
  for (let round = 0; round < 5; round += 1) {
    const conn = await amqp.connect(URL);
    const errors = [];
    conn.on('error', (err) => errors.push(err));
    const ch = await conn.createChannel();
    const { queue } = await ch.assertQueue(unique('node-close'), { exclusive: true });
    const body = Buffer.alloc(64 * 1024, 'x');
    for (let i = 0; i < 200; i += 1) {
      ch.sendToQueue(queue, body);  // not awaited: these are still in amqplib's buffers
    }
    await conn.close();
    assert.deepEqual(errors, []);
  }
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
