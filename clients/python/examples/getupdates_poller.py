"""One getUpdates poller across every instance of a bot (leader election),
each update handled once (the seed pattern).

    BOT_TOKEN=... REDLOCKD_SOCKET=/run/redlockd.sock python3 getupdates_poller.py

Run as many copies as you like: one leads and polls, the others wait in
the daemon's line and take over when it resigns, dies or loses its lock.

Why: Telegram serves one ``getUpdates`` long poll per bot token at a time.
A second poller makes one of the two fail with ``409 Conflict: terminated
by other getUpdates request; make sure that only one bot instance is
running`` (a webhook set on the bot gives 409 as well), and the two steal
updates from each other.  So exactly one instance polls.

Handover is not instantaneous for Telegram: a poll the old leader sent may
still be open when the new leader polls, which then gets a 409 once; it
waits a moment and polls again.  And updates the old leader fetched but
did not confirm (Telegram confirms an update when a later poll passes an
``offset`` above it) come again to the new leader.  That is why each update
goes through the seed pattern as well: acquire ``tg:update:<id>``, handle,
``complete``; a duplicate gets ``busy`` or ``done`` and is skipped.

Standard library only.  ``TELEGRAM_API_ROOT`` points it at another Bot API
server (a local one, or a test double).
"""

import json
import logging
import os
import time
import urllib.error
import urllib.request

from redlockd import LockLostError, RedlockClient, dedup, leader

API = os.environ.get("TELEGRAM_API_ROOT", "https://api.telegram.org")
TOKEN = os.environ.get("BOT_TOKEN", "")
POLL_S = 20          # long-poll timeout
log = logging.getLogger("poller")


class Conflict(Exception):
    """409 from getUpdates: another poll (or a webhook) is active."""


def call(method, **params):
    req = urllib.request.Request(
        "%s/bot%s/%s" % (API, TOKEN, method),
        data=json.dumps(params).encode(),
        headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=POLL_S + 10) as r:
            return json.load(r)["result"]
    except urllib.error.HTTPError as e:
        if e.code == 409:
            raise Conflict(e.read().decode(errors="replace")) from None
        raise


def handle(update, lock):
    """Your handler.  ``lock.fence`` orders writes; ``lock.lost`` says the
    lock went (then stop: another worker may run this update)."""
    log.info("update %s (fence %s)", update["update_id"], lock.fence)


def poll_while_leading(client, term, offset):
    while not term.lost.is_set():
        try:
            updates = call("getUpdates", offset=offset, timeout=POLL_S)
        except Conflict as e:      # the old leader's poll is still open
            log.warning("409 Conflict (%s); polling again shortly", e)
            term.lost.wait(1.0)
            continue
        for u in updates:
            if term.lost.is_set():
                break              # not confirmed: the next leader gets it
            dedup.process_once(client, dedup.update_key(u["update_id"]),
                               lambda lock, u=u: handle(u, lock),
                               ttl_ms=60000, renew=True)
            offset = u["update_id"] + 1
    return offset


def main():
    logging.basicConfig(level=logging.INFO)
    client = RedlockClient()
    bot_id = TOKEN.split(":", 1)[0]
    offset = None
    while True:
        try:
            with leader.lead(client, "tg:poller:" + bot_id) as term:
                log.info("leading (fence %s)", term.fence)
                offset = poll_while_leading(client, term, offset)
        except LockLostError:
            log.warning("leadership lost; standing by again")
        except OSError as e:       # Telegram unreachable: lead again later
            log.warning("poll failed: %s", e)
            time.sleep(1)


if __name__ == "__main__":
    main()
