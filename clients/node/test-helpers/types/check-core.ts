// Compiled with skipLibCheck off: the package's own declarations must be
// error-free on their own (no bot framework types involved).
import { RedlockClient, createDedup } from 'redlockd-client';
import { dedupMiddleware } from 'redlockd-client/grammy';

const client = new RedlockClient();
const mw = createDedup(client, { ttlMs: 1000 });
const mw2 = dedupMiddleware<{ update: { update_id: number }; chat: string }>(client, { key: (ctx) => ctx.chat });
void [mw, mw2];
