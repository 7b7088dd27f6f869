// Direct reply-to (amq.rabbitmq.reply-to) with amqplib: the RPC round trip, the 406 before
// consuming, the return of a reply whose consumer is gone, and the server capability.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { REPLY, unique, within, withConnection } from './support.mjs';

test('server properties announce direct_reply_to', () =>
  withConnection(async (conn) => {
    assert.equal(conn.connection.serverProperties.capabilities.direct_reply_to, true);
  }));

test('RPC round trip through amq.rabbitmq.reply-to', () =>
  withConnection(async (conn) => {
    const server = await conn.createChannel();
    const { queue } = await server.assertQueue(unique('node-rpc'), { exclusive: true });
    const seen = [];
    await server.consume(queue, (msg) => {
      seen.push(msg.properties.replyTo);
      server.sendToQueue(msg.properties.replyTo, Buffer.from(msg.content.toString().toUpperCase()),
        { correlationId: msg.properties.correlationId });
    }, { noAck: true });

    const client = await conn.createChannel();
    const replies = [];
    let allIn;
    const done = new Promise((resolve) => { allIn = resolve; });
    await client.consume(REPLY, (msg) => {
      replies.push([msg.properties.correlationId, msg.content.toString()]);
      if (replies.length === 3) allIn();
    }, { noAck: true });
    for (const i of [0, 1, 2]) {
      client.sendToQueue(queue, Buffer.from(`ping-${i}`), { replyTo: REPLY, correlationId: String(i) });
    }
    await within(done, 5000, 'three replies');
    assert.deepEqual(replies, [['0', 'PING-0'], ['1', 'PING-1'], ['2', 'PING-2']]);
    assert.ok(seen.every((address) => address.startsWith(`${REPLY}.`) && address === seen[0]));
  }));

test('publishing with reply-to before consuming is 406 PRECONDITION_FAILED', () =>
  withConnection(async (conn) => {
    const ch = await conn.createChannel();
    const closed = new Promise((resolve) => ch.on('error', resolve));
    ch.sendToQueue(unique('node-nobody'), Buffer.from('x'), { replyTo: REPLY });
    const err = await within(closed, 5000, 'channel error');
    assert.equal(err.code, 406);
    assert.match(err.message, /PRECONDITION_FAILED - fast reply consumer does not exist/);
  }));

test('a mandatory reply to a consumer that is gone is returned', () =>
  withConnection(async (conn) => {
    const client = await conn.createChannel();
    const { consumerTag } = await client.consume(REPLY, () => {}, { noAck: true });
    const { queue } = await client.assertQueue(unique('node-req'), { exclusive: true });
    client.sendToQueue(queue, Buffer.from('req'), { replyTo: REPLY });
    let request = false;
    for (let i = 0; i < 100 && !request; i += 1) {
      request = await client.get(queue, { noAck: true });
    }
    assert.ok(request, 'the request arrived');
    const address = request.properties.replyTo;
    await client.cancel(consumerTag);

    const replier = await conn.createConfirmChannel();
    const returned = new Promise((resolve) => replier.on('return', resolve));
    replier.publish('', address, Buffer.from('late'), { mandatory: true });
    const msg = await within(returned, 5000, 'basic.return');
    assert.equal(msg.fields.replyCode, 312);
    assert.equal(msg.content.toString(), 'late');
    await replier.waitForConfirms();
  }));
