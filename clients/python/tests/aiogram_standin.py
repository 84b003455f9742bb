"""A stand-in for the parts of aiogram 3 that redlockd.aiogram meets.

aiogram cannot be installed here (no PyPI), so this installs modules in
sys.modules with the documented interface, and ``feed()`` does what
aiogram's ``FSMContextMiddleware`` does with ``Dispatcher(events_isolation
=...)``: build the ``StorageKey`` of the update's bot, chat and user, and
run the handler inside ``async with events_isolation.lock(key=key)``.
Call ``install()`` before importing redlockd.aiogram (``uninstall()``
afterwards in a shared test process).
"""

import sys
import types
from abc import ABC, abstractmethod
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, AsyncGenerator, Optional

DEFAULT_DESTINY = "default"


@dataclass(frozen=True)
class StorageKey:                       # aiogram.fsm.storage.base.StorageKey
    bot_id: int
    chat_id: int
    user_id: int
    thread_id: Optional[int] = None
    business_connection_id: Optional[str] = None
    destiny: str = DEFAULT_DESTINY


class BaseEventIsolation(ABC):          # aiogram.fsm.storage.base
    @abstractmethod
    @asynccontextmanager
    async def lock(self, key: StorageKey) -> AsyncGenerator[None, None]:
        yield None

    @abstractmethod
    async def close(self) -> None:
        pass


NAMES = ["aiogram", "aiogram.fsm", "aiogram.fsm.storage",
         "aiogram.fsm.storage.base"]


def uninstall() -> None:
    """Take the stand-in out of sys.modules again (other tests check that
    redlockd imports no aiogram)."""
    for n in NAMES:
        sys.modules.pop(n, None)


def install() -> None:
    names = NAMES
    mods = {n: sys.modules.get(n) or types.ModuleType(n) for n in names}
    base = mods["aiogram.fsm.storage.base"]
    base.StorageKey = StorageKey
    base.BaseEventIsolation = BaseEventIsolation
    base.DEFAULT_DESTINY = DEFAULT_DESTINY
    for n in names:
        sys.modules[n] = mods[n]


async def feed(isolation: Any, handler: Any, update: dict,
               bot_id: int = 42) -> Any:
    """FSMContextMiddleware.__call__ for one update: key, lock, handler."""
    key = StorageKey(bot_id=bot_id, chat_id=update["chat"],
                     user_id=update["user"])
    data = {"update": update}
    async with isolation.lock(key=key):
        return await handler(update, data)
