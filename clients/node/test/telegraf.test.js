// Telegraf + dedupMiddleware, with the real telegraf package (devDependency).
import { dedupMiddleware } from '../telegraf.js';
import { BOT_INFO } from '../test-helpers/daemon.js';
import { dedupSuite } from '../test-helpers/dedup-suite.js';

let telegraf = null;
try {
  telegraf = await import('telegraf');
} catch {
  /* not installed */
}

dedupSuite('Telegraf', {
  skip: telegraf ? false : 'telegraf is not installed: run `npm ci` in clients/node',
  dedupMiddleware,
  makeBot({ apiRoot, middleware, handler }) {
    // A fake token, botInfo set (no getMe); every API call goes to apiRoot,
    // a loopback server of the test.
    const bot = new telegraf.Telegraf('123456789:FAKE-token-for-tests', { telegram: { apiRoot } });
    bot.botInfo = BOT_INFO;
    // Telegraf's default error handler sets process.exitCode = 1; rethrow
    // instead so that handleUpdate rejects like grammY's does.
    bot.catch((err) => {
      throw err;
    });
    bot.use(middleware);
    bot.on('message', handler);
    return { handleUpdate: (u) => bot.handleUpdate(u) };
  },
});
