// A contender for test/leader.test.js, run as its own process:
//
//   node leader-worker.js SOCK RESOURCE OUT TERMS HOLD_MS TTL_MS
//
// Leads TERMS times (client.runAsLeader), each term HOLD_MS long (HOLD_MS <
// 0: until killed), and appends "start <monotonic ns> <fence> <pid>" when a
// term begins and "end <monotonic ns> <pid>" before it resigns.
// process.hrtime.bigint() is CLOCK_MONOTONIC, one clock for all processes.
import { appendFileSync } from 'node:fs';

import { RedlockClient } from '../index.js';

const [sock, resource, out, terms, holdMs, ttlMs] = process.argv.slice(2);
const note = (line) => appendFileSync(out, line + '\n');
const client = new RedlockClient({ path: sock });
for (let i = 0; i < Number(terms); i++) {
  await client.runAsLeader(resource, { ttlMs: Number(ttlMs) }, async (signal, term) => {
    note(`start ${process.hrtime.bigint()} ${term.fence} ${process.pid}`);
    await new Promise((resolve) => {
      const t = Number(holdMs) < 0 ? null : setTimeout(resolve, Number(holdMs));
      if (t === null) setInterval(() => {}, 1 << 30); // until killed
      signal.addEventListener('abort', () => resolve(), { once: true });
    });
    note(`end ${process.hrtime.bigint()} ${process.pid}`);
  });
}
await client.close();
