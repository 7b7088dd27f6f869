// Shared by the amqplib tests: the broker's URL (set by tests/e2e/test_e2e_node.py) and a bounded wait.
import amqp from 'amqplib';

export const URL = process.env.AMQP_URL;
export const HTTP_URL = process.env.HTTP_URL;
export const REPLY = 'amq.rabbitmq.reply-to';

export function unique(prefix) {
  return `${prefix}-${Math.random().toString(16).slice(2, 10)}`;
}

// resolves with the promise's value, or rejects after `ms` (no test waits unbounded)
export function within(promise, ms = 5000, what = 'event') {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no ${what} within ${ms} ms`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

export async function withConnection(fn) {
  const conn = await amqp.connect(URL);
  conn.on('error', () => {});
  try {
    return await fn(conn);
  } finally {
    await conn.close().catch(() => {});
  }
}
