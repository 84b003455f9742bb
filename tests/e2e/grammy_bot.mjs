// grammy_bot.mjs: one grammY bot instance for the end-to-end Telegram test.
//
// The real grammy package (clients/node's dev dependency) and the Node
// client's dedupMiddleware, against the fake Bot API (apiRoot on
// 127.0.0.1) and a redlockd unix socket. Every update handled ends in
// ctx.reply("done <n>"), the side effect that must happen exactly once.
//
// Environment:
//   E2E_API          fake API root, e.g. http://127.0.0.1:PORT/i/g1
//   E2E_TOKEN        bot token
//   E2E_INSTANCE     instance name (for the event log)
//   E2E_MODE         "webhook" (a local HTTP server + setWebhook, each POST
//                    goes to bot.handleUpdate) or "poll" (bot.start())
//   E2E_EVENTS       JSON-lines event log (appended synchronously, so that
//                    it survives SIGKILL)
//   REDLOCKD_SOCKET  the daemon's socket
//   E2E_TTL_MS, E2E_KEEP_MS       dedup lock TTL and done-mark lifetime
//   E2E_HANDLER_MIN_MS, E2E_HANDLER_MAX_MS   handler duration (random)
//   E2E_VICTIM_UPDATE  update_id whose handler, after taking the lock, sends
//                    sendChatAction and then hangs (the test SIGKILLs us)
//   E2E_MAX_CONNECTIONS  webhook max_connections (default 40)
//   E2E_LIFETIME_MS  exit by itself after this long (a bound, default 150 s)
//   E2E_NO_DEDUP     set: no dedup middleware (negative control)

import fs from 'node:fs';
import http from 'node:http';
import { createRequire } from 'node:module';

const nodeClient = new URL('../../clients/node/', import.meta.url);
// grammy is installed under clients/node/node_modules (npm ci there).
const require = createRequire(new URL('package.json', nodeClient));
const { Bot } = require('grammy');
const { RedlockClient } = await import(new URL('index.js', nodeClient));
const { dedupMiddleware } = await import(new URL('grammy.js', nodeClient));

const env = process.env;
const INSTANCE = env.E2E_INSTANCE;
const MODE = env.E2E_MODE;
const TTL_MS = Number(env.E2E_TTL_MS ?? 5000);
const KEEP_MS = Number(env.E2E_KEEP_MS ?? 60000);
const HMIN = Number(env.E2E_HANDLER_MIN_MS ?? 50);
const HMAX = Number(env.E2E_HANDLER_MAX_MS ?? 300);
const VICTIM = env.E2E_VICTIM_UPDATE ? Number(env.E2E_VICTIM_UPDATE) : undefined;
const SECRET = `secret-${INSTANCE}`;

const events = fs.openSync(env.E2E_EVENTS, 'a');
function ev(obj) {
  fs.writeSync(events, JSON.stringify({ t: Date.now() / 1000, inst: INSTANCE, ...obj }) + '\n');
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const lifetime = setTimeout(() => {
  ev({ ev: 'lifetime_exceeded' });
  process.exit(3);
}, Number(env.E2E_LIFETIME_MS ?? 150000));
lifetime.unref();

const client = new RedlockClient({ path: env.REDLOCKD_SOCKET, timeoutMs: 5000 });
const bot = new Bot(env.E2E_TOKEN, {
  client: { apiRoot: env.E2E_API },
  botInfo: {
    id: 4242, is_bot: true, first_name: 'E2E', username: 'redlockd_e2e_bot',
    can_join_groups: true, can_read_all_group_messages: false,
    supports_inline_queries: false,
  },
});

// Outermost: record what reached this instance and how it ended.
bot.use(async (ctx, next) => {
  const u = ctx.update.update_id;
  ev({ ev: 'recv', u });
  try {
    await next();
  } catch (err) {
    ev({ ev: 'error', u, msg: String(err?.stack ?? err) });
    throw err;
  }
  ev({ ev: 'end', u });
});

// E2E_NO_DEDUP=1: the negative control (the test must then fail).
if (!env.E2E_NO_DEDUP) {
  bot.use(dedupMiddleware(client, {
    ttlMs: TTL_MS,
    keepMs: KEEP_MS,
    onDuplicate: (ctx, err) => ev({ ev: 'skip', u: ctx.update.update_id, reason: err.code }),
  }));
}

bot.on('message:text', async (ctx) => {
  const u = ctx.update.update_id;
  const n = ctx.message.text.replace(/^job /, '');
  ev({ ev: 'start', u });
  if (u === VICTIM) {
    // We hold tg:update:<u>. Tell the test (through the fake API), then hang
    // until it SIGKILLs this process: no sendMessage, no complete.
    await ctx.api.sendChatAction(ctx.chat.id, 'typing');
    ev({ ev: 'victim_holding', u });
    await sleep(60000);
  }
  await sleep(HMIN + Math.random() * (HMAX - HMIN));
  await ctx.reply(`done ${n}`);
  ev({ ev: 'handled', u });
});

let server;
async function shutdown(sig) {
  ev({ ev: 'shutdown', sig });
  const hard = setTimeout(() => process.exit(0), 3000);
  hard.unref();
  try {
    if (MODE === 'poll') await bot.stop();
    if (server) await new Promise((r) => server.close(r));
    await client.close();
  } catch (err) {
    ev({ ev: 'shutdown_error', msg: String(err) });
  }
  process.exit(0);
}
process.on('SIGTERM', () => shutdown('SIGTERM'));
process.on('SIGINT', () => shutdown('SIGINT'));

if (MODE === 'webhook') {
  server = http.createServer((req, res) => {
    if (req.method !== 'POST' || req.url !== '/hook') {
      res.writeHead(404).end();
      return;
    }
    if (req.headers['x-telegram-bot-api-secret-token'] !== SECRET) {
      res.writeHead(401).end();
      return;
    }
    const chunks = [];
    let size = 0;
    req.on('data', (c) => {
      size += c.length;
      if (size > 1 << 20) req.destroy();
      else chunks.push(c);
    });
    req.on('end', () => {
      let update;
      try {
        update = JSON.parse(Buffer.concat(chunks).toString('utf8'));
      } catch {
        res.writeHead(400).end();
        return;
      }
      // 200 only once the middleware (dedup, handler, complete) finished;
      // an error answers 500 so that the fake API delivers again.
      bot.handleUpdate(update).then(
        () => res.writeHead(200, { 'content-type': 'application/json' }).end('{}'),
        () => res.writeHead(500).end(),
      );
    });
  });
  server.listen(0, '127.0.0.1', async () => {
    const { port } = server.address();
    try {
      await bot.api.setWebhook(`http://127.0.0.1:${port}/hook`, {
        max_connections: Number(env.E2E_MAX_CONNECTIONS ?? 40),
        secret_token: SECRET,
      });
      ev({ ev: 'ready', mode: MODE, port });
    } catch (err) {
      ev({ ev: 'fatal', msg: String(err) });
      process.exit(1);
    }
  });
} else if (MODE === 'poll') {
  bot.catch((err) => ev({ ev: 'bot_error', u: err.ctx?.update?.update_id, msg: String(err.error) }));
  bot.start({
    timeout: 1,
    limit: 5,
    onStart: () => ev({ ev: 'ready', mode: MODE }),
  }).catch((err) => {
    ev({ ev: 'fatal', msg: String(err) });
    process.exit(1);
  });
} else {
  console.error(`E2E_MODE must be webhook or poll, not ${MODE}`);
  process.exit(2);
}
