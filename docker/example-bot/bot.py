"""Example bot for the docker compose and Kubernetes examples.

A stand-in for a Telegram bot run as several replicas: a simulated webhook
delivers every update to *every* replica (as a retry or a second poller
would), and each replica handles it through redlockd's process-once core
(``redlockd.dedup``: acquire ``tg:update:<id>``, handle, ``complete``).
Across the replicas each update is handled exactly once; the others log
``busy`` (the first is still handling it) or ``done`` (it was handled).

It needs no Telegram token and no network, only the daemon's socket. For a
real bot see clients/python/examples/ptb_dedup.py and redlockd.aiogram.

One JSON line per delivery on stdout:
    {"bot": "a1b2c3", "update": 1732931234, "outcome": "handled"}
outcome: handled, busy, done, or error:<code> (no_quorum, ...: a real
webhook would get a 5xx and Telegram would deliver the update again).
A summary line ends the run.

Environment:
    REDLOCKD_SOCKET       the daemon's socket (/run/redlockd/redlockd.sock)
    BOT_NAME              name in the log lines (default: the hostname)
    BOT_INTERVAL_MS       one update per interval (default 1000)
    BOT_FIRST_UPDATE      first update id; 0 (default): ids from the wall
                          clock, so replicas started apart agree on them
    BOT_UPDATES           stop after this many deliveries; 0 (default):
                          run until SIGTERM
    BOT_WORK_MS           handler time, +-50% at random (default 300)
    BOT_TTL_MS            lock ttl, longer than any handler (default 30000)
    BOT_KEEP_MS           life of the done mark (default 600000; a real
                          bot keeps it longer than Telegram's redelivery
                          window, a day)
    BOT_START_TIMEOUT_S   wait this long for the daemon's quorum (60)
Exit status: 0 after SIGTERM/SIGINT or BOT_UPDATES deliveries, 1 if the
daemon never became healthy, 2 for a bad variable.
"""

import json
import os
import random
import signal
import socket
import sys
import threading
import time

from redlockd import (ConnectionLostError, NoQuorumError, RedlockClient,
                      RedlockError, RequestTimeoutError, dedup)


def env_int(name, default, minimum=0):
    raw = os.environ.get(name, "")
    if raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        value = minimum - 1
    if value < minimum:
        print("bot: %s must be an integer >= %d, not %r" % (name, minimum,
                                                             raw),
              file=sys.stderr)
        sys.exit(2)
    return value


def emit(obj):
    print(json.dumps(obj, sort_keys=True), flush=True)


def wait_healthy(client, stop, timeout_s):
    """Wait for the daemon to answer health with a quorum; bounded."""
    deadline = time.monotonic() + timeout_s
    delay = 0.1
    last = None
    while not stop.is_set() and time.monotonic() < deadline:
        try:
            client.health()
            return True
        except (ConnectionLostError, NoQuorumError, RequestTimeoutError,
                OSError) as e:
            last = e
        stop.wait(min(delay, max(0.0, deadline - time.monotonic())))
        delay = min(delay * 2, 2.0)
    if not stop.is_set():
        print("bot: redlockd at %s not healthy after %ss: %s"
              % (client.path, timeout_s, last), file=sys.stderr)
    return False


def main():
    name = os.environ.get("BOT_NAME") or socket.gethostname()
    interval_ms = env_int("BOT_INTERVAL_MS", 1000, 1)
    first = env_int("BOT_FIRST_UPDATE", 0)
    updates = env_int("BOT_UPDATES", 0)
    work_ms = env_int("BOT_WORK_MS", 300)
    ttl_ms = env_int("BOT_TTL_MS", 30000, 10)
    keep_ms = env_int("BOT_KEEP_MS", 600000, 1)
    start_timeout = env_int("BOT_START_TIMEOUT_S", 60, 1)

    stop = threading.Event()

    def on_signal(signum, frame):
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    client = RedlockClient(timeout=10.0)
    if not wait_healthy(client, stop, start_timeout):
        client.close()
        return 0 if stop.is_set() else 1

    counts = {"handled": 0, "busy": 0, "done": 0, "error": 0}
    rng = random.Random()

    def handle(update_id):
        # The bot's real work (reply, write to a database) would go here.
        stop.wait(work_ms * rng.uniform(0.5, 1.5) / 1000.0)
        return "handled"

    n = 0
    next_id = first
    if next_id == 0:
        next_id = int(time.time() * 1000) // interval_ms + 1
    while not stop.is_set() and (updates == 0 or n < updates):
        if first == 0:
            # Update k arrives at every replica at time k * interval, plus
            # a little network jitter that decides who gets it first.
            due = next_id * interval_ms / 1000.0
            jitter = rng.uniform(0, min(interval_ms, 200)) / 1000.0
            if stop.wait(max(0.0, due - time.time()) + jitter):
                break
        elif n > 0 and stop.wait(rng.uniform(0, interval_ms) / 1000.0):
            break
        update_id = next_id
        try:
            result = dedup.process_once(client, dedup.update_key(update_id),
                                        lambda: handle(update_id),
                                        ttl_ms=ttl_ms, keep_ms=keep_ms)
            outcome = (result.reason if isinstance(result, dedup.Skipped)
                       else result)
            counts[outcome] += 1
        except (RedlockError, OSError) as e:
            outcome = "error:%s" % getattr(e, "code", type(e).__name__)
            counts["error"] += 1
        emit({"bot": name, "update": update_id, "outcome": outcome})
        n += 1
        next_id += 1
        if first == 0:
            # Skip the updates whose time passed while handling this one.
            now_id = int(time.time() * 1000) // interval_ms
            next_id = max(next_id, now_id)

    emit({"bot": name, "summary": counts})
    client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
