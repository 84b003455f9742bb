"""A bot process for test_isolation.py: updates through RedlockEventIsolation
(with the aiogram stand-in), all at once as aiogram's handle_as_tasks does.

    bot_worker.py SOCK BOT_ID CHATS UPDATES_PER_CHAT HOLD_MS

Prints one JSON list: {chat, start, end, fence, pid} per handled update,
times in CLOCK_MONOTONIC ns (shared by all processes).
"""

import asyncio
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import aiogram_standin  # noqa: E402

aiogram_standin.install()

from redlockd.aiogram import RedlockEventIsolation, chat_lock  # noqa: E402


async def main() -> None:
    sock, bot_id, chats, per_chat, hold_ms = sys.argv[1:6]
    chats = [int(c) for c in chats.split(",")]
    seen = []

    async def handler(update, data):
        lock = chat_lock()
        start = time.monotonic_ns()
        await asyncio.sleep(int(hold_ms) / 1000.0)
        seen.append({"chat": update["chat"], "start": start,
                     "end": time.monotonic_ns(), "fence": lock.fence,
                     "resource": lock.resource, "pid": os.getpid()})

    iso = RedlockEventIsolation(sock, ttl_ms=5000, wait_ms=60000)
    assert isinstance(iso, aiogram_standin.BaseEventIsolation)
    try:
        await asyncio.gather(*(
            aiogram_standin.feed(iso, handler, {"chat": c, "user": c},
                                 int(bot_id))
            for _ in range(int(per_chat)) for c in chats))
    finally:
        await iso.close()
    print(json.dumps(seen))


asyncio.run(main())
