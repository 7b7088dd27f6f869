// A consumer whose own channel deletes its queue gets basic.cancel (amqplib calls the consumer
// with null) after queue.delete-ok, for plain, auto-delete and exclusive queues, as on RabbitMQ.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { unique, within, withConnection } from './support.mjs';

for (const kind of ['plain', 'auto-delete', 'exclusive']) {
  test(`consumer is cancelled when its own channel deletes a ${kind} queue`, () =>
    withConnection(async (conn) => {
      const ch = await conn.createChannel();
      const { queue } = await ch.assertQueue(unique(`node-${kind}`), {
        durable: false, autoDelete: kind === 'auto-delete', exclusive: kind === 'exclusive',
      });
      let cancelled;
      const gotCancel = new Promise((resolve) => { cancelled = resolve; });
      const { consumerTag } = await ch.consume(queue, (msg) => { if (msg === null) cancelled(); }, { noAck: true });
      const deleted = await ch.deleteQueue(queue);
      assert.equal(deleted.messageCount, 0);
      await within(gotCancel, 5000, `basic.cancel for ${consumerTag}`);
      // the channel is still usable
      const again = await ch.assertQueue(unique('node-after'), { exclusive: true });
      assert.match(again.queue, /^node-after-/);
      await ch.close();
    }));
}
