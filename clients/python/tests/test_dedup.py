"""The update-dedup core (sync and async), the aiogram middleware and the
python-telegram-bot example (with stand-ins for telegram: neither framework
is installed here)."""

import asyncio
import importlib.util
import os
import shutil
import sys
import tempfile
import threading
import time
import types
from pathlib import Path

import pytest

from conftest import rname, sleep_until_lost
from redlockd import (AsyncRedlockClient, BusyError, ConnectionLostError,
                      NoQuorumError, RedlockClient, RedlockError,
                      RequestTimeoutError, ShuttingDownError, dedup)
from redlockd.aiogram import UpdateDedupMiddleware

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


# -- sync core ---------------------------------------------------------------

def test_duplicates_handled_once(client):
    key = dedup.update_key(rname("upd"))
    calls = []
    for _ in range(5):
        res = dedup.process_once(client, key, lambda: calls.append(1) or
                                 "handled", ttl_ms=10000, keep_ms=60000)
        if len(calls) == 1 and res == "handled":
            continue
        assert res is dedup.DONE and not res
    assert calls == [1]


def test_concurrent_duplicate_is_busy(client, sock):
    key = dedup.update_key(rname("upd"))
    started, go = threading.Event(), threading.Event()
    out = {}

    def slow():
        started.set()
        go.wait(5)
        return "first"

    def first():
        out["first"] = dedup.process_once(client, key, slow, 10000, 60000)

    t = threading.Thread(target=first)
    t.start()
    assert started.wait(5)
    with RedlockClient(sock) as other:  # another worker
        res = dedup.process_once(other, key, lambda: "second", 10000, 60000)
        assert res is dedup.BUSY and res.reason == "busy"
        go.set()
        t.join(5)
        assert out["first"] == "first"
        res = dedup.process_once(other, key, lambda: "third", 10000, 60000)
        assert res is dedup.DONE


def test_handler_exception_allows_retry(client):
    key = dedup.update_key(rname("upd"))
    attempts = []

    def flaky():
        attempts.append(1)
        if len(attempts) == 1:
            raise RuntimeError("boom")
        return "ok"

    with pytest.raises(RuntimeError):
        dedup.process_once(client, key, flaky, 10000, 60000)
    assert dedup.process_once(client, key, flaky, 10000, 60000) == "ok"
    assert dedup.process_once(client, key, flaky, 10000, 60000) is dedup.DONE
    assert len(attempts) == 2


def test_keep_ms_bounds_the_done_mark(client):
    key = dedup.update_key(rname("upd"))
    assert dedup.process_once(client, key, lambda: 1, 5000, 200) == 1
    assert dedup.process_once(client, key, lambda: 2, 5000, 200) is dedup.DONE
    time.sleep(0.4)
    assert dedup.process_once(client, key, lambda: 3, 5000, 200) == 3


def test_other_errors_propagate(tmp_path):
    c = RedlockClient(str(tmp_path / "none.sock"))
    with pytest.raises(ConnectionError):
        dedup.process_once(c, "tg:update:1", lambda: 1)


# -- async core --------------------------------------------------------------

def test_async_dedup(sock):
    async def main():
        async with AsyncRedlockClient(sock) as c, \
                AsyncRedlockClient(sock) as c2:
            key = dedup.update_key(rname("upd"))
            calls = []
            gate = asyncio.Event()

            async def handler():
                calls.append(1)
                await gate.wait()
                return "done"

            first = asyncio.ensure_future(
                dedup.process_once(c, key, handler, 10000, 60000))
            await asyncio.sleep(0.2)
            # Duplicates, concurrently, from two connections.
            dups = await asyncio.gather(
                *[dedup.aprocess_once(cc, key, handler, 10000, 60000)
                  for cc in (c, c2, c, c2)])
            assert all(d is dedup.BUSY for d in dups)
            gate.set()
            assert await first == "done"
            assert await dedup.aprocess_once(c2, key, handler) is dedup.DONE
            assert calls == [1]

            # A failing handler releases: the retry runs.
            key2 = dedup.update_key(rname("upd"))
            with pytest.raises(ValueError):
                await dedup.aprocess_once(
                    c, key2, lambda: (_ for _ in ()).throw(ValueError()))
            assert await dedup.aprocess_once(c2, key2, lambda: 7) == 7
    asyncio.run(asyncio.wait_for(main(), 30))


# -- aiogram glue ------------------------------------------------------------

def test_aiogram_middleware(sock):
    async def main():
        async with AsyncRedlockClient(sock) as c:
            mw = UpdateDedupMiddleware(c, ttl_ms=10000, keep_ms=60000)
            seen = []

            async def handler(event, data):
                seen.append(event.update_id)
                if data.get("fail"):
                    raise RuntimeError("handler failed")
                return "handled"

            uid = int(time.time() * 1000) % 10**12
            ev = types.SimpleNamespace(update_id=uid)
            assert await mw(handler, ev, {}) == "handled"
            assert await mw(handler, ev, {}) is None        # duplicate
            other = types.SimpleNamespace(update_id=uid + 1)
            with pytest.raises(RuntimeError):
                await mw(handler, other, {"fail": True})
            assert await mw(handler, other, {}) == "handled"  # retried
            # Without an update_id the event passes through.
            plain = types.SimpleNamespace()
            seen_before = list(seen)
            assert await mw(lambda e, d: asyncio.sleep(0, "x"), plain,
                            {}) == "x"
            assert seen == seen_before == [uid, uid + 1, uid + 1]
            # Custom key, e.g. per bot.
            mw2 = UpdateDedupMiddleware(
                c, key=lambda e, d: "tg:%s:%s" % (d["bot"].id, e.update_id))
            bot = types.SimpleNamespace(id=rname("bot"))
            assert await mw2(handler, ev, {"bot": bot}) == "handled"
            assert await mw2(handler, ev, {"bot": bot}) is None
    asyncio.run(asyncio.wait_for(main(), 30))


def test_aiogram_module_imports_no_aiogram():
    import redlockd.aiogram as glue
    assert "aiogram" not in sys.modules
    with pytest.raises(TypeError):
        glue.UpdateDedupMiddleware(RedlockClient("/nonexistent"))


# -- python-telegram-bot example ----------------------------------------------

class _Stop(Exception):
    pass


def _fake_telegram(monkeypatch):
    """Just enough of telegram / telegram.ext for examples/ptb_dedup.py."""
    tg = types.ModuleType("telegram")
    ext = types.ModuleType("telegram.ext")

    class Update:
        ALL_TYPES = ["message"]

        def __init__(self, update_id):
            self.update_id = update_id

    class TypeHandler:
        def __init__(self, type_, callback):
            self.type = type_
            self.callback = callback

    class CommandHandler:
        def __init__(self, cmd, callback):
            self.type = Update
            self.callback = callback

    class ContextTypes:
        DEFAULT_TYPE = object

    class Application:
        def __init__(self):
            self.handlers = {}
            self.error_handlers = []
            self.error_handler_errors = []

        def add_handler(self, handler, group=0):
            self.handlers.setdefault(group, []).append(handler)

        def add_error_handler(self, cb):
            self.error_handlers.append(cb)  # blocking, PTB's default

        async def process_error(self, update, error):
            """PTB v20's Application.process_error for blocking error
            handlers: each is called in order; one that raises
            ApplicationHandlerStop ends the loop and makes this return True;
            any other exception of an error handler is only logged."""
            for cb in self.error_handlers:
                ctx = types.SimpleNamespace(error=error)
                try:
                    await cb(update, ctx)
                except _Stop:
                    return True
                except Exception:
                    self.error_handler_errors.append(sys.exc_info()[1])
            return False

        async def process_update(self, update):
            """PTB v20's Application.process_update: groups ascending, at
            most one handler per group; ApplicationHandlerStop from a handler
            ends the update; any other exception goes to process_error, and
            the next group runs unless an error handler raised
            ApplicationHandlerStop."""
            ctx = types.SimpleNamespace(error=None)
            for group in sorted(self.handlers):
                try:
                    for h in self.handlers[group]:
                        if not isinstance(update, h.type):
                            continue  # TypeHandler.check_update
                        await h.callback(update, ctx)
                        break  # one handler per group
                except _Stop:
                    break
                except Exception as e:
                    if await self.process_error(update, e):
                        break

    tg.Update = Update
    ext.TypeHandler = TypeHandler
    ext.CommandHandler = CommandHandler
    ext.ContextTypes = ContextTypes
    ext.Application = Application
    ext.ApplicationHandlerStop = _Stop
    tg.ext = ext
    monkeypatch.setitem(sys.modules, "telegram", tg)
    monkeypatch.setitem(sys.modules, "telegram.ext", ext)
    return tg, ext


def _load_example():
    spec = importlib.util.spec_from_file_location(
        "ptb_dedup_example", str(EXAMPLES / "ptb_dedup.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_ptb_example(sock, monkeypatch):
    tg, ext = _fake_telegram(monkeypatch)
    example = _load_example()

    async def main():
        async with AsyncRedlockClient(sock) as c:
            app = ext.Application()
            held = example.install_dedup(app, c, ttl_ms=10000, keep_ms=60000)
            handled = []
            fail_once = {"n": 0}

            async def business(update, context):
                assert context.redlock is held[update.update_id]
                if update.update_id % 2 and fail_once["n"] == 0:
                    fail_once["n"] += 1
                    raise RuntimeError("first try fails")
                handled.append(update.update_id)

            app.add_handler(ext.TypeHandler(tg.Update, business), group=0)
            base = int(time.time() * 1000) % 10**9 * 2
            u_ok, u_flaky = tg.Update(base), tg.Update(base + 1)
            for u in (u_ok, u_ok, u_flaky, u_flaky, u_flaky, u_ok):
                await app.process_update(u)
            assert handled == [base, base + 1]
            assert held == {}
            # Done marks are there: a duplicate stops at the gate.
            with pytest.raises(_Stop):
                await app.handlers[-1][0].callback(u_ok, None)
    asyncio.run(asyncio.wait_for(main(), 30))


class _FailingClient:
    """An AsyncRedlockClient whose acquire always raises ``error``."""

    is_async = True

    def __init__(self, error):
        self.error = error
        self.acquires = 0

    async def acquire(self, resource, **kw):
        self.acquires += 1
        raise self.error


def _gated_app(ext, tg, example, client):
    """The example installed on a stand-in Application, with a business
    handler in group 0, an audit handler in group 1 and an error handler of
    the bot's own (added before install_dedup, as the example says)."""
    app = ext.Application()
    seen = {"business": [], "audit": [], "errors": []}

    async def own_error_handler(update, context):
        seen["errors"].append(context.error)

    app.add_error_handler(own_error_handler)
    held = example.install_dedup(app, client, ttl_ms=10000, keep_ms=60000)

    async def business(update, context):
        seen["business"].append(update.update_id)

    async def audit(update, context):
        seen["audit"].append(update.update_id)

    app.add_handler(ext.TypeHandler(tg.Update, business), group=0)
    app.add_handler(ext.TypeHandler(tg.Update, audit), group=1)
    return app, held, seen


def test_ptb_example_fails_closed_daemon_down(monkeypatch):
    """No daemon at the socket path: the gate cannot take the lock, so no
    delivery of the update may reach a handler (it used to run 3 times)."""
    tg, ext = _fake_telegram(monkeypatch)
    example = _load_example()
    d = tempfile.mkdtemp(prefix="rl-ptb-")

    async def main():
        c = AsyncRedlockClient(os.path.join(d, "none.sock"),
                               connect_timeout=1, timeout=2)
        try:
            app, held, seen = _gated_app(ext, tg, example, c)
            for _ in range(3):                  # the same update, 3 times
                await app.process_update(tg.Update(42))
            assert seen["business"] == [] and seen["audit"] == []
            assert held == {}
            assert seen["errors"] == []  # a stop, not an error
        finally:
            await c.close()
    try:
        asyncio.run(asyncio.wait_for(main(), 30))
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_ptb_example_fails_closed_daemon_silent(monkeypatch):
    """A daemon that accepts but never answers: RequestTimeoutError in the
    gate, and still no handler runs."""
    tg, ext = _fake_telegram(monkeypatch)
    example = _load_example()
    d = tempfile.mkdtemp(prefix="rl-ptb-")
    path = os.path.join(d, "silent.sock")

    async def main():
        async def silent(reader, writer):
            try:
                await reader.read()             # until the client closes
            finally:
                writer.close()

        server = await asyncio.start_unix_server(silent, path)
        c = AsyncRedlockClient(path, connect_timeout=1, timeout=0.3)
        try:
            app, held, seen = _gated_app(ext, tg, example, c)
            for _ in range(3):
                await app.process_update(tg.Update(43))
            assert seen["business"] == [] and seen["audit"] == []
            assert held == {}
        finally:
            await c.close()
            server.close()
            await server.wait_closed()
    try:
        asyncio.run(asyncio.wait_for(main(), 30))
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.mark.parametrize("error", [
    NoQuorumError("no quorum"), ShuttingDownError("shutting down"),
    ConnectionLostError("connection lost"), RedlockError("odd", "new_code"),
    RuntimeError("not a RedlockError"),
])
def test_ptb_example_fails_closed_on_gate_errors(monkeypatch, error):
    """Every error of the gate stops the update: the client's errors in the
    gate itself, anything else through the error handler."""
    tg, ext = _fake_telegram(monkeypatch)
    example = _load_example()

    async def main():
        c = _FailingClient(error)
        app, held, seen = _gated_app(ext, tg, example, c)
        for _ in range(3):
            await app.process_update(tg.Update(44))
        assert c.acquires == 3
        assert seen["business"] == [] and seen["audit"] == []
        assert held == {}
        if isinstance(error, RedlockError):
            assert seen["errors"] == []
        else:
            assert seen["errors"] == [error] * 3
        assert app.error_handler_errors == []
    asyncio.run(asyncio.wait_for(main(), 30))


def test_ptb_example_handler_raises_stops_later_groups(sock, monkeypatch):
    """A group-0 handler raises: the lock is released (a redelivery runs it
    again) and no later group runs that delivery without the lock."""
    tg, ext = _fake_telegram(monkeypatch)
    example = _load_example()

    async def main():
        async with AsyncRedlockClient(sock) as c, \
                AsyncRedlockClient(sock) as other:
            app, held, seen = _gated_app(ext, tg, example, c)
            attempts = []

            async def business(update, context):
                attempts.append(update.update_id)
                if len(attempts) <= 2:
                    raise RuntimeError("attempt %d fails" % len(attempts))
                seen["business"].append(update.update_id)

            app.handlers[0] = [ext.TypeHandler(tg.Update, business)]
            uid = int(time.time() * 1000) % 10**9
            u = tg.Update(uid)
            await app.process_update(u)
            assert held == {} and seen["audit"] == []
            # Released, not completed: another worker can take it now.
            lk = await other.acquire(dedup.update_key(uid), ttl_ms=5000)
            await other.release(lk)
            for _ in range(3):
                await app.process_update(u)
            assert attempts == [uid] * 3     # fail, fail, ok, then done
            assert seen["business"] == [uid]
            assert seen["audit"] == [uid]   # only on the delivery that held
            assert [str(e) for e in seen["errors"]] == \
                ["attempt 1 fails", "attempt 2 fails"]
            assert held == {}
            # A job's error (no update) is not stopped by the example.
            assert await app.process_error(None, RuntimeError("job")) is False
    asyncio.run(asyncio.wait_for(main(), 30))


# -- aiogram: the middleware wraps the handler, so it fails closed too --------

def test_aiogram_middleware_fails_closed_daemon_down():
    d = tempfile.mkdtemp(prefix="rl-aio-")

    async def main():
        c = AsyncRedlockClient(os.path.join(d, "none.sock"),
                               connect_timeout=1, timeout=2)
        try:
            mw = UpdateDedupMiddleware(c)
            calls = []

            async def handler(event, data):
                calls.append(event.update_id)

            ev = types.SimpleNamespace(update_id=45)
            for _ in range(3):
                with pytest.raises(ConnectionLostError):
                    await mw(handler, ev, {})
            assert calls == []
        finally:
            await c.close()
    try:
        asyncio.run(asyncio.wait_for(main(), 30))
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.mark.parametrize("error", [NoQuorumError("no quorum"),
                                   RequestTimeoutError("timed out")])
def test_aiogram_middleware_fails_closed_on_errors(error):
    async def main():
        c = _FailingClient(error)
        mw = UpdateDedupMiddleware(c)
        calls = []

        async def handler(event, data):
            calls.append(event.update_id)

        for _ in range(3):
            with pytest.raises(type(error)):
                await mw(handler, types.SimpleNamespace(update_id=46), {})
        assert calls == [] and c.acquires == 3
    asyncio.run(asyncio.wait_for(main(), 30))


def test_busy_is_not_an_error_class_leak():
    # process_once turns busy/done into the Skipped sentinels only.
    assert issubclass(BusyError, Exception)
    assert isinstance(dedup.BUSY, dedup.Skipped) and not dedup.BUSY


def test_ptb_example_cancels_a_guarded_handler_on_lost(nodes, monkeypatch):
    """under_lock(): a handler whose update lock is lost (renewal loses the
    quorum) is cancelled in its own task; the error handler stops the
    update, so the completion group does not run; PTB's task lives on."""
    tg, ext = _fake_telegram(monkeypatch)
    example = _load_example()
    cluster, d = nodes
    seen = []

    async def main():
        async with AsyncRedlockClient(d.path) as c:
            app = ext.Application()
            failures = []

            async def record(update, context):
                failures.append(context.error)
            app.add_error_handler(record)   # before install_dedup's
            held = example.install_dedup(app, c, ttl_ms=1000, renew=True)

            async def business(update, context):
                seen.append(context.redlock.resource)
                await sleep_until_lost(cluster, (0, 1, 2),
                                       lambda: seen.append("cancelled"))

            app.add_handler(ext.TypeHandler(
                tg.Update, example.under_lock(held, business)), group=0)
            u = tg.Update(int(time.time() * 1000) % 10**9 * 2 + 1)
            try:
                await asyncio.wait_for(app.process_update(u), 15)
            finally:
                cluster.resume_all()
            assert held == {}
            assert [type(e).__name__ for e in failures] == ["LockLostError"]
            seen.append([type(e).__name__ for e in app.error_handler_errors])
    asyncio.run(main())
    assert seen[1:] == ["cancelled", []]
    assert seen[0].startswith("tg:update:")
