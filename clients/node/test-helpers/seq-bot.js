// A bot process for test/sequentialize.test.js: a real grammY or Telegraf
// bot with sequentialize(client), fed all its updates at once (as a runner
// with concurrency does), handlers that take HOLD_MS.
//
//   node seq-bot.js grammy|telegraf SOCK CHATS PER_CHAT HOLD_MS FIRST_UPDATE_ID
//
// Prints one JSON list: {chat, start, end, fence, resource, pid} per update,
// times from process.hrtime.bigint() (CLOCK_MONOTONIC) as strings.
import { RedlockClient } from '../index.js';
import { BOT_INFO, messageUpdate, sleep } from './daemon.js';

const [framework, sock, chats, perChat, holdMs, first] = process.argv.slice(2);
const client = new RedlockClient({ path: sock });
const mw = (await import(`../${framework}.js`)).sequentialize(client, { ttlMs: 5000 });
const seen = [];
const handler = async (ctx) => {
  const lock = ctx.lock;
  if (!(lock.signal instanceof AbortSignal)) throw new Error('ctx.lock.signal missing');
  const start = process.hrtime.bigint();
  await sleep(Number(holdMs));
  seen.push({
    chat: ctx.chat.id,
    start: String(start),
    end: String(process.hrtime.bigint()),
    fence: String(lock.fence),
    resource: lock.resource,
    pid: process.pid,
  });
};
let bot;
// API calls would go to a closed loopback port: the handlers make none.
const apiRoot = 'http://127.0.0.1:9';
if (framework === 'grammy') {
  const { Bot } = await import('grammy');
  bot = new Bot('123456789:FAKE-token-for-tests', { botInfo: BOT_INFO, client: { apiRoot } });
} else {
  const { Telegraf } = await import('telegraf');
  bot = new Telegraf('123456789:FAKE-token-for-tests', { telegram: { apiRoot } });
  bot.botInfo = BOT_INFO;
  bot.catch((err) => {
    throw err;
  });
}
bot.use(mw);
bot.on('message', handler);
const updates = [];
let id = Number(first);
for (let i = 0; i < Number(perChat); i++) {
  for (const chat of chats.split(',').map(Number)) {
    const u = messageUpdate(id++);
    u.message.chat = { id: chat, type: 'private', first_name: 'T' };
    updates.push(u);
  }
}
await Promise.all(updates.map((u) => bot.handleUpdate(u)));
await client.close();
process.stdout.write(JSON.stringify(seen));
