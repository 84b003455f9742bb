"""python-telegram-bot (v20+) example: handle each Telegram update once.

When several workers can receive the same update (webhooks behind a load
balancer, redeliveries after a restart), a gate in handler group -1 takes the
lock ``tg:update:<update_id>`` through redlockd before any other handler runs:

  - a duplicate (``busy`` while the first is running, ``done`` after it)
    raises ApplicationHandlerStop, so no other group sees it;
  - after the last group the update is ``complete``d (a done mark, 1 day);
  - if a handler raised, the error handler releases the lock so that a
    redelivery can retry, and raises ApplicationHandlerStop so that no later
    group runs the update without the lock (PTB v20+ hands a handler's
    exception to the error handlers and then goes on with the next group,
    unless an error handler raises ApplicationHandlerStop).

It fails closed: when the gate cannot take the lock (redlockd down or
unreachable, ``no_quorum``, a timeout: any RedlockError), the update is
logged and dropped on this worker rather than handled without dedup.  A
redelivery is handled once the lock can be taken again.

The error handler stops every failed Update, and PTB calls no error handler
after one that raised ApplicationHandlerStop: add your own error handlers
*before* calling install_dedup.  Handlers must be blocking (PTB's default):
the last group only runs after a ``block=False`` handler has been started,
not finished.

Run:  REDLOCKD_SOCKET=/run/redlockd.sock TELEGRAM_TOKEN=... python ptb_dedup.py
(start the daemon first, e.g. ``redlockd --dev``).  The dedup logic itself
is redlockd.dedup (begin / finish), which the client's tests cover.

Caveat: a handler that raises ApplicationHandlerStop itself skips the final
group, so that update is not completed; its lock then expires after
``ttl_ms`` and a later redelivery would run it again.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Dict

from telegram import Update
from telegram.ext import (Application, ApplicationHandlerStop, CommandHandler,
                          ContextTypes, TypeHandler)

from redlockd import AsyncRedlockClient, RedlockError
from redlockd import dedup, scope

log = logging.getLogger("ptb_dedup")

LAST_GROUP = 1_000_000  # after every group the bot uses


def install_dedup(application: Any, client: AsyncRedlockClient, *,
                  ttl_ms: int = dedup.DEFAULT_TTL_MS,
                  keep_ms: int = dedup.DEFAULT_KEEP_MS,
                  renew: bool = False) -> Dict[int, Any]:
    """Add the gate (group -1), the completion (last group) and the error
    handler to ``application``.  Returns the map of updates in progress
    (update_id -> lock); :func:`under_lock` wraps a handler with it.
    ``renew=True`` keeps the lock while long handlers run."""
    held: Dict[int, Any] = {}  # update_id -> lock, while being handled

    async def gate(update: Update, context: Any) -> None:
        update_id = update.update_id
        try:
            lock = await dedup.abegin(client, dedup.update_key(update_id),
                                      ttl_ms, renew=renew)
        except RedlockError as e:
            # Fail closed: without the lock a duplicate cannot be told from
            # a first delivery, so no other group may see this update.
            log.error("update %s not handled: no dedup lock: %r", update_id,
                      e)
            raise ApplicationHandlerStop from e
        if isinstance(lock, dedup.Skipped):
            log.info("update %s is a duplicate (%s): skipped", update_id,
                     lock.reason)
            raise ApplicationHandlerStop
        held[update_id] = lock
        # The lock in the handlers' hands: PTB passes one CallbackContext to
        # every group of an update (its __dict__ takes attributes), so later
        # handlers read context.redlock (token, fence, lost).  PTB runs the
        # groups in its own task (the fetcher's, without concurrent_updates),
        # which must not be cancelled: wrap a handler in under_lock() to
        # have its work cancelled when the lock is lost.
        try:
            context.redlock = lock
        except AttributeError:  # a context type without attributes
            pass

    async def done(update: Update, context: Any) -> None:
        lock = held.pop(update.update_id, None)
        if lock is not None:
            await dedup.afinish(client, lock, True, keep_ms)

    async def on_error(update: object, context: Any) -> None:
        update_id = getattr(update, "update_id", None)
        lock = held.pop(update_id, None) if update_id is not None else None
        if lock is not None:
            await dedup.afinish(client, lock, False)  # let a retry run it
        log.error("update %s failed: %r", update_id, context.error)
        if isinstance(update, Update):
            # PTB would go on with the next group, without the lock (just
            # released, or never taken if the gate itself failed): stop the
            # update here.  Errors of jobs (update None) are not stopped.
            raise ApplicationHandlerStop

    application.add_handler(TypeHandler(Update, gate), group=-1)
    application.add_handler(TypeHandler(Update, done), group=LAST_GROUP)
    application.add_error_handler(on_error)
    return held


def under_lock(held: Dict[int, Any], handler: Any) -> Any:
    """Wrap a PTB handler callback: it runs in a task of its own, which is
    cancelled if the update's lock is lost (LockLostError then goes to the
    error handler, which stops the update: nothing is completed, so a
    redelivery runs it again)."""
    async def guarded(update: Any, context: Any) -> Any:
        lock = held.get(getattr(update, "update_id", None))
        if lock is None:
            return await handler(update, context)
        return await scope.run_until_lost(lock, handler(update, context))
    return guarded


async def start(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
    await update.message.reply_text("hello, once")


def main() -> None:
    logging.basicConfig(level=logging.INFO)
    client = AsyncRedlockClient()  # $REDLOCKD_SOCKET or ./redlockd.sock

    async def post_shutdown(app: Any) -> None:
        await client.close()

    application = (Application.builder()
                   .token(os.environ["TELEGRAM_TOKEN"])
                   .post_shutdown(post_shutdown)
                   .build())
    held = install_dedup(application, client, renew=True)
    application.add_handler(CommandHandler("start", under_lock(held, start)))
    application.run_polling(allowed_updates=Update.ALL_TYPES)


if __name__ == "__main__":
    main()
