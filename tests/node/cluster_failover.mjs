// An amqplib publisher through a cluster's failover (run by tests/cluster/test_cluster_clients.py):
// one URL (a follower's port), amqplib's own opt-in recovery reconnecting the connection, and what
// an application adds to it: a new confirm channel after each reconnect, and the next message sent
// on it. Persistent messages numbered 0, 1, ... each waited for its confirm; prints `kill` once
// KILL_AFTER are confirmed (the test then kills the leader), and at the end one JSON line: the
// numbers confirmed and the reconnects seen.
import amqp from 'amqplib';

const URL = process.env.AMQP_URL;
const QUEUE = process.env.QUEUE;
const KILL_AFTER = Number(process.env.KILL_AFTER || 200);
const AFTER = Number(process.env.AFTER || 200); // confirms wanted after the first reconnect

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function confirmed(ch, n) {
  // resolves on the broker's ack; rejects on a nack, a closed channel, or 5 s of silence
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('no confirm within 5 s')), 5000);
    ch.sendToQueue(QUEUE, Buffer.from(String(n)), { persistent: true }, (err) => {
      clearTimeout(timer);
      if (err) reject(err);
      else resolve();
    });
  });
}

const conn = await amqp.connect(URL, { recovery: { initialDelay: 100, maxDelay: 500, maxRetries: Infinity } });
let reconnects = 0;
let channel = null;
conn.on('error', () => {});
conn.on('disconnect', () => { channel = null; });
conn.on('connect', () => { reconnects += 1; }); // the first connect came before `connect` resolved

async function openChannel() {
  for (;;) {
    try {
      const ch = await conn.createConfirmChannel();
      ch.on('error', () => {});
      ch.on('close', () => { if (channel === ch) channel = null; });
      await ch.assertQueue(QUEUE, { durable: true });
      return ch;
    } catch {
      await sleep(100);
    }
  }
}

const done = [];
let killed = false;
let afterReconnect = 0;
const deadline = Date.now() + 60_000;
for (let n = 0; Date.now() < deadline; n++) {
  if (!channel) channel = await openChannel();
  const ch = channel;
  try {
    await confirmed(ch, n);
    done.push(n);
    if (reconnects > 0) afterReconnect += 1;
  } catch {
    if (channel === ch) channel = null; // this channel is done for: the next message goes on a new one
    await ch.close().catch(() => {});
    await sleep(50);
  }
  if (!killed && done.length >= KILL_AFTER) {
    killed = true;
    console.log('kill');
  }
  if (afterReconnect >= AFTER) break;
}
console.log(JSON.stringify({ confirmed: done, reconnects, after: afterReconnect }));
await conn.close().catch(() => {});
process.exit(afterReconnect >= AFTER ? 0 : 1);
