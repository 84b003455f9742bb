"""py_bot.py: a Python bot instance for the end-to-end Telegram test.

A getUpdates poller (urllib, against the fake Bot API on 127.0.0.1) that
handles each batch on a few threads, each update through the Python
client's dedup core, redlockd.dedup.process_once, with one shared
synchronous RedlockClient. The handler sleeps a random 50-300 ms and calls
sendMessage "done <n>".

Environment: E2E_API (fake API root, http://127.0.0.1:PORT/i/<instance>),
E2E_TOKEN, E2E_INSTANCE, E2E_EVENTS (JSON-lines log), REDLOCKD_SOCKET,
E2E_TTL_MS, E2E_KEEP_MS, E2E_HANDLER_MIN_MS, E2E_HANDLER_MAX_MS,
E2E_LIFETIME_MS (exits by itself after it, a bound), E2E_NO_DEDUP=1 (no
dedup: the negative control). SIGTERM: stops after the current poll.
"""

import json
import logging
import os
import random
import signal
import sys
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]
                       / "clients" / "python"))

from redlockd import RedlockClient, dedup  # noqa: E402

env = os.environ
API = env["E2E_API"]
TOKEN = env["E2E_TOKEN"]
INSTANCE = env["E2E_INSTANCE"]
TTL_MS = int(env.get("E2E_TTL_MS", "5000"))
KEEP_MS = int(env.get("E2E_KEEP_MS", "60000"))
HMIN = int(env.get("E2E_HANDLER_MIN_MS", "50"))
HMAX = int(env.get("E2E_HANDLER_MAX_MS", "300"))
LIFETIME = int(env.get("E2E_LIFETIME_MS", "150000")) / 1000.0
NO_DEDUP = env.get("E2E_NO_DEDUP", "") not in ("", "0")  # negative control

_ev_lock = threading.Lock()
_ev_file = open(env["E2E_EVENTS"], "a", buffering=1)


def ev(**kw):
    line = json.dumps(dict(t=time.time(), inst=INSTANCE, **kw))
    with _ev_lock:
        _ev_file.write(line + "\n")


# Loopback only: never through an http_proxy from the environment.
_opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class _EventLog(logging.Handler):
    """The client logs (not raises) a failed complete/release in dedup:
    record those warnings as errors, with the exception's class name."""

    def emit(self, record):
        excs = [type(a).__name__ for a in (record.args or ())
                if isinstance(a, BaseException)]
        ev(ev="error", u=None, msg="%s%s" % (
            "".join(x + ": " for x in excs), record.getMessage()))


_h = _EventLog(level=logging.WARNING)
logging.getLogger("redlockd").addHandler(_h)
logging.getLogger("redlockd").setLevel(logging.INFO)


def call(method, http_timeout=10.0, **params):
    req = urllib.request.Request(
        "%s/bot%s/%s" % (API, TOKEN, method),
        data=json.dumps(params).encode(),
        headers={"Content-Type": "application/json"})
    with _opener.open(req, timeout=http_timeout) as r:
        body = json.loads(r.read())
    if not body.get("ok"):
        raise RuntimeError("%s: %r" % (method, body))
    return body["result"]


stop = threading.Event()
signal.signal(signal.SIGTERM, lambda *_: stop.set())
signal.signal(signal.SIGINT, lambda *_: stop.set())


def handle(update):
    u = update["update_id"]
    msg = update["message"]
    n = msg["text"].split(" ", 1)[1]
    ev(ev="start", u=u)
    time.sleep(random.uniform(HMIN, HMAX) / 1000.0)
    call("sendMessage", chat_id=msg["chat"]["id"], text="done %s" % n)
    ev(ev="handled", u=u)


def on_update(client, update):
    u = update["update_id"]
    ev(ev="recv", u=u)
    try:
        if NO_DEDUP:
            res = handle(update)
        else:
            res = dedup.process_once(client, dedup.update_key(u),
                                     lambda: handle(update),
                                     ttl_ms=TTL_MS, keep_ms=KEEP_MS)
    except Exception as e:  # daemon error: neither handled nor marked
        ev(ev="error", u=u, msg=repr(e))
        return
    if isinstance(res, dedup.Skipped):
        ev(ev="skip", u=u, reason=res.reason)
    ev(ev="end", u=u)


def main():
    me = call("getMe")
    ev(ev="ready", mode="poll", me=me.get("username"))
    client = RedlockClient(env["REDLOCKD_SOCKET"], timeout=5.0)
    offset = 0
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=5) as pool:
        for _ in range(100000):
            if stop.is_set() or time.monotonic() - started > LIFETIME:
                break
            try:
                batch = call("getUpdates", http_timeout=5.0, offset=offset,
                             limit=5, timeout=1)
            except OSError as e:
                ev(ev="poll_error", msg=repr(e))
                time.sleep(0.2)
                continue
            if batch:
                list(pool.map(lambda upd: on_update(client, upd), batch))
                offset = max(upd["update_id"] for upd in batch) + 1
    client.close()
    ev(ev="shutdown")


if __name__ == "__main__":
    main()
