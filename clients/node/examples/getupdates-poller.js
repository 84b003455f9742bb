// One getUpdates poller across every instance of a bot (leader election),
// each update handled once (the seed pattern).
//
//   BOT_TOKEN=... REDLOCKD_SOCKET=/run/redlockd.sock node getupdates-poller.js
//
// Telegram serves one getUpdates long poll per bot token at a time: a second
// poller makes one of them fail with "409 Conflict: terminated by other
// getUpdates request; make sure that only one bot instance is running" (a
// webhook set on the bot gives 409 as well), and the two steal updates from
// each other. So one instance leads and polls; the others wait in the
// daemon's line and take over when it resigns, dies or loses the lock.
//
// A poll the old leader sent may still be open when the new leader polls:
// that gets a 409 once; wait and poll again. Updates the old leader fetched
// but did not confirm (a poll confirms every update below its offset) come
// again to the new leader: hence the seed pattern beside the leader, acquire
// tg:update:<id>, handle, complete (createDedup); a duplicate is skipped.
//
// With grammY or Telegraf, run `bot.start()` / `bot.launch()` inside
// runAsLeader instead of this loop, and stop the bot when the signal aborts.
import { RedlockClient, createDedup } from 'redlockd-client';

const API = process.env.TELEGRAM_API_ROOT ?? 'https://api.telegram.org';
const TOKEN = process.env.BOT_TOKEN ?? '';
const client = new RedlockClient();
const once = createDedup(client, { ttlMs: 60_000, renew: true });

async function handle(ctx) {
  // ctx.lock.signal aborts if the update's lock is lost: stop then.
  console.log('update', ctx.update.update_id, 'lock', ctx.lock.token);
}

let offset = 0;

async function pollWhileLeading(signal) {
  while (!signal.aborted) {
    const res = await fetch(`${API}/bot${TOKEN}/getUpdates?timeout=20&offset=${offset}`, { signal }).catch(
      (e) => ({ status: 0, error: e }),
    );
    if (res.status === 409) {
      // The old leader's poll is still open.
      await new Promise((r) => setTimeout(r, 1000));
      continue;
    }
    if (res.status !== 200) {
      if (signal.aborted) continue; // leadership ended: the poll was cancelled
      // 401: a wrong BOT_TOKEN; 0: Telegram unreachable. Say so, and wait.
      const why = res.error ? res.error.message : `${res.status} ${(await res.json().catch(() => ({}))).description}`;
      console.warn('getUpdates failed:', why);
      await new Promise((r) => setTimeout(r, 1000));
      continue;
    }
    for (const update of (await res.json()).result) {
      if (signal.aborted) break; // not confirmed: the next leader gets it
      const ctx = { update };
      await once(ctx, () => handle(ctx)); // skipped if busy or done
      offset = update.update_id + 1;
    }
  }
}

for (;;) {
  try {
    await client.runAsLeader(`tg:poller:${TOKEN.split(':')[0]}`, { ttlMs: 5000 }, pollWhileLeading);
  } catch (e) {
    console.warn('leadership ended:', e.message); // LostError: stand by again
    await new Promise((r) => setTimeout(r, 1000));
  }
}
