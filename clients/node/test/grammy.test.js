// grammY + dedupMiddleware, with the real grammy package (devDependency).
import { dedupMiddleware } from '../grammy.js';
import { BOT_INFO } from '../test-helpers/daemon.js';
import { dedupSuite } from '../test-helpers/dedup-suite.js';

let grammy = null;
try {
  grammy = await import('grammy');
} catch {
  /* not installed */
}

dedupSuite('grammY', {
  skip: grammy ? false : 'grammy is not installed: run `npm ci` in clients/node',
  dedupMiddleware,
  makeBot({ apiRoot, middleware, handler }) {
    // A fake token and botInfo: no getMe; every API call goes to apiRoot,
    // a loopback server of the test.
    const bot = new grammy.Bot('123456789:FAKE-token-for-tests', {
      botInfo: BOT_INFO,
      client: { apiRoot },
    });
    bot.use(middleware);
    bot.on('message', handler);
    return { handleUpdate: (u) => bot.handleUpdate(u) };
  },
});
