"""Every error code maps to its exception class; most are provoked for real."""

import asyncio
import json
import socket
import threading
import time

import pytest

import redlockd
from conftest import rname
from redlockd import (ERRORS, AsyncRedlockClient, BadRequestError, BusyError,
                      ConnectionLostError, DoneError, InternalError,
                      LimitError, NoQuorumError, NotHeldError, RedlockClient,
                      RedlockError, ShuttingDownError, TooLargeError,
                      error_from_response)

CODES = {
    "bad_request": BadRequestError,
    "not_held": NotHeldError,
    "busy": BusyError,
    "done": DoneError,
    "too_large": TooLargeError,
    "limit": LimitError,
    "no_quorum": NoQuorumError,
    "shutting_down": ShuttingDownError,
    "internal": InternalError,
}


@pytest.mark.parametrize("code,cls", sorted(CODES.items()))
def test_code_maps_to_class(code, cls):
    resp = {"id": 3, "ok": False, "error": {"code": code, "message": "m"}}
    err = error_from_response(resp)
    assert type(err) is cls
    assert isinstance(err, RedlockError)
    assert err.code == code and err.message == "m" and err.response is resp
    assert ERRORS[code] is cls
    assert getattr(redlockd, cls.__name__) is cls
    assert str(err) == "%s: m" % code


def test_every_class_is_distinct():
    assert len(set(CODES.values())) == len(CODES) == len(ERRORS)
    assert issubclass(ConnectionLostError, RedlockError)


def test_unknown_code_is_base_error():
    err = error_from_response({"ok": False,
                               "error": {"code": "new_thing",
                                         "message": "x"}})
    assert type(err) is RedlockError and err.code == "new_thing"


def test_bad_request_from_daemon(client):
    with pytest.raises(BadRequestError) as ei:
        client.acquire(rname(), ttl_ms=5)
    assert "ttl_ms" in ei.value.message
    with pytest.raises(BadRequestError):
        client.release("nope", resource="r")
    with pytest.raises(BadRequestError):
        client.acquire("")
    assert client.ping()  # a field error keeps the connection


def test_wait_ms_not_a_number_is_a_bad_request(client, sock):
    # Not a TypeError from the client's timeout arithmetic: the daemon's
    # bad_request, naming the field, like any other bad value.
    for bad in (None, "5"):
        with pytest.raises(BadRequestError, match="wait_ms"):
            client.acquire(rname(), wait_ms=bad)

    async def main():
        async with AsyncRedlockClient(sock) as c:
            with pytest.raises(BadRequestError, match="wait_ms"):
                await c.acquire(rname(), wait_ms=None)
    asyncio.run(asyncio.wait_for(main(), 30))
    assert client.ping()


def test_bad_request_client_side(client):
    with pytest.raises(BadRequestError):
        client.acquire("\ud800")  # cannot be UTF-8


def test_not_held_from_daemon(client):
    with pytest.raises(NotHeldError):
        client.release("0123456789abcdef0123456789abcdef", resource=rname())
    with pytest.raises(NotHeldError):
        client.extend("0123456789abcdef0123456789abcdef", 1000,
                      resource=rname())
    with pytest.raises(NotHeldError):
        client.complete("0123456789abcdef0123456789abcdef",
                        resource=rname())


def test_too_large_refused_locally(client):
    # A line over the daemon's default 64 KiB limit is not sent: the daemon
    # would answer too_large and close the connection, dropping every
    # session lock on it, a lock of another thread too.
    held = client.acquire(rname())
    with pytest.raises(TooLargeError):
        client.acquire("x" * 70000)
    with pytest.raises(TooLargeError):
        client.request("acquire", resource=rname(), pad="x" * 70000)
    assert not held.lost.is_set()
    client.release(held)  # still held, on the same connection


def test_too_large_refused_locally_async(sock):
    async def main():
        async with AsyncRedlockClient(sock) as c:
            held = await c.acquire(rname())
            with pytest.raises(TooLargeError):
                await c.acquire("x" * 70000)
            assert not held.lost.is_set()
            await c.release(held)
    asyncio.run(asyncio.wait_for(main(), 30))


def test_too_large_through_client(spawn):
    # A line over a smaller --max-line-bytes: the daemon answers once,
    # without an id (it could not read one), and closes the connection.
    d = spawn.daemon(extra=("--max-line-bytes", "1024"))
    with RedlockClient(d.path) as c:
        with pytest.raises(ConnectionLostError) as ei:
            c.request("acquire", resource=rname(), pad="x" * 2000)
        assert isinstance(ei.value.daemon_error, TooLargeError)
        assert c.ping()  # the next request reconnects


def test_too_large_raw(sock):
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(5)
        s.connect(sock)
        s.sendall(b'{"op":"ping","id":1,"pad":"' + b"x" * 70000 + b'"}\n')
        data = b""
        while b"\n" not in data:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
    resp = json.loads(data.split(b"\n")[0])
    assert isinstance(error_from_response(resp), TooLargeError)


def test_limit(spawn):
    d = spawn.daemon(extra=("--max-conn-locks", "1"))
    with RedlockClient(d.path) as c:
        c.acquire(rname())
        with pytest.raises(LimitError):
            c.acquire(rname())


def test_shutting_down(spawn):
    d = spawn.daemon()
    r = rname()
    out = {}
    with RedlockClient(d.path) as holder, RedlockClient(d.path) as waiter:
        holder.acquire(r)

        def wait():
            try:
                waiter.acquire(r, wait_ms=20000)
            except Exception as e:
                out["error"] = e

        t = threading.Thread(target=wait)
        t.start()
        time.sleep(0.3)
        d.signal(15)  # SIGTERM: waiters are answered shutting_down
        t.join(10)
        assert not t.is_alive()
    assert isinstance(out.get("error"), ShuttingDownError), out
    assert d.wait(10) == 0
