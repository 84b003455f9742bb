"""RedlockClient (sync) against a real daemon."""

import re
import threading
import time

import pytest

from conftest import rname
from redlockd import (BusyError, ConnectionLostError, DoneError, Lock,
                      NotHeldError, RedlockClient, RequestTimeoutError)

TOKEN = re.compile(r"^[0-9a-f]{32}$")


def test_ping(client):
    assert client.ping() is True
    assert client.connected


def test_acquire_release(client):
    r = rname()
    lock = client.acquire(r, ttl_ms=10000)
    assert isinstance(lock, Lock)
    assert TOKEN.match(lock.token)
    assert lock.resource == r
    assert 0 < lock.validity_ms <= 10000
    assert lock.fence is None
    assert not lock.lost.is_set()
    client.release(lock)
    assert lock.finished
    with pytest.raises(NotHeldError):
        client.release(lock)
    again = client.acquire(r)
    assert again.token != lock.token
    again.release()


def test_busy(client, sock):
    r = rname()
    lock = client.acquire(r)
    with RedlockClient(sock) as other:
        with pytest.raises(BusyError) as ei:
            other.acquire(r)
        assert ei.value.code == "busy"
    # On the same connection too: a lock has one owner, its token.
    with pytest.raises(BusyError):
        client.acquire(r)
    client.release(lock)


def test_done_after_complete(client, sock):
    r = rname()
    lock = client.acquire(r)
    client.complete(lock, keep_ms=60000)
    with pytest.raises(NotHeldError):
        client.release(lock)  # completing dropped the lock
    with RedlockClient(sock) as other:
        with pytest.raises(DoneError):
            other.acquire(r)
        t0 = time.monotonic()
        with pytest.raises(DoneError):
            other.acquire(r, wait_ms=5000)  # waiting stops on done
        assert time.monotonic() - t0 < 2.0


def test_done_mark_expires(client):
    r = rname()
    client.complete(client.acquire(r), keep_ms=200)
    with pytest.raises(DoneError):
        client.acquire(r)
    time.sleep(0.4)
    client.acquire(r).release()


def test_extend(client, sock):
    r = rname()
    lock = client.acquire(r, ttl_ms=400)
    assert lock.validity_ms <= 400
    assert client.extend(lock, ttl_ms=5000) is lock
    assert 400 < lock.validity_ms <= 5000
    time.sleep(0.8)  # past the first ttl
    with RedlockClient(sock) as other:
        with pytest.raises(BusyError):
            other.acquire(r)
    lock.extend()  # default: the lock's ttl
    client.release(lock)


def test_extend_expired_is_not_held(client):
    lock = client.acquire(rname(), ttl_ms=50)
    time.sleep(0.3)
    with pytest.raises(NotHeldError):
        client.extend(lock, 1000)


def test_fence_increasing(client, sock):
    r = rname()
    fences = []
    with RedlockClient(sock) as other:
        for i in range(6):
            c = client if i % 2 else other
            lock = c.acquire(r, fence=True)
            assert isinstance(lock.fence, int)
            fences.append(lock.fence)
            c.release(lock)
    assert fences == sorted(fences) and len(set(fences)) == len(fences), \
        fences


def test_wait_ms(client, sock):
    r = rname()
    lock = client.acquire(r, ttl_ms=30000)
    result = {}

    def waiter():
        with RedlockClient(sock) as other:
            t0 = time.monotonic()
            try:
                got = other.acquire(r, wait_ms=10000)
                result["waited"] = time.monotonic() - t0
                result["token"] = got.token
                other.release(got)
            except Exception as e:  # reported below
                result["error"] = e

    t = threading.Thread(target=waiter)
    t.start()
    time.sleep(0.5)
    client.release(lock)
    t.join(15)
    assert not t.is_alive()
    assert "error" not in result, result
    assert result["token"] != lock.token
    # It got it after the release (not before), and well before wait_ms.
    assert 0.4 <= result["waited"] < 5.0, result


def test_wait_ms_runs_out(client, sock):
    r = rname()
    lock = client.acquire(r)
    with RedlockClient(sock) as other:
        t0 = time.monotonic()
        with pytest.raises(BusyError):
            other.acquire(r, wait_ms=300)
        assert 0.25 <= time.monotonic() - t0 < 3.0
    client.release(lock)


def test_renew_keeps_short_lock(client, sock):
    r = rname()
    lock = client.acquire(r, ttl_ms=300, renew=True)
    assert lock.validity_ms <= 300
    with RedlockClient(sock) as other:
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:
            with pytest.raises(BusyError):
                other.acquire(r)
            time.sleep(0.1)
    assert not lock.lost.is_set()
    client.release(lock)


def test_without_renew_short_lock_expires(client, sock):
    r = rname()
    client.acquire(r, ttl_ms=300)
    time.sleep(0.5)
    with RedlockClient(sock) as other:
        other.acquire(r).release()


def test_renew_max_ms_stops_renewing(client, sock):
    r = rname()
    client.acquire(r, ttl_ms=200, renew=True, renew_max_ms=400)
    with RedlockClient(sock) as other:
        other.acquire(r, wait_ms=3000).release()


def test_many_threads_one_connection(client):
    prefix = rname("many")
    n_threads, per_thread = 20, 10
    locks, errors = [], []
    mu = threading.Lock()
    start = threading.Barrier(n_threads)

    def worker(k):
        try:
            start.wait(5)
            mine = []
            for i in range(per_thread):
                res = "%s:%d:%d" % (prefix, k, i)
                lk = client.acquire(res, ttl_ms=30000, fence=(i % 2 == 0))
                assert lk.resource == res
                mine.append(lk)
                assert client.ping()
            with mu:
                locks.extend(mine)
        except Exception as e:
            with mu:
                errors.append(e)

    threads = [threading.Thread(target=worker, args=(k,))
               for k in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors, errors[:3]
    assert len(locks) == n_threads * per_thread == 200
    assert len({lk.token for lk in locks}) == 200
    assert len(client._conn.locks) >= 200
    release_errors = []

    def releaser(chunk):
        for lk in chunk:
            try:
                client.release(lk)
            except Exception as e:
                release_errors.append(e)

    chunks = [locks[i::n_threads] for i in range(n_threads)]
    threads = [threading.Thread(target=releaser, args=(c,)) for c in chunks]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not release_errors, release_errors[:3]
    assert not client._conn.pending
    assert not client._conn.locks


def test_lock_context_manager(client, sock):
    r = rname()
    with client.lock(r, ttl_ms=5000) as lock:
        assert isinstance(lock, Lock)
        with RedlockClient(sock) as other:
            with pytest.raises(BusyError):
                other.acquire(r)
    assert lock.finished
    client.acquire(r).release()

    with pytest.raises(ZeroDivisionError):
        with client.lock(r, ttl_ms=5000, renew=True) as lock2:
            1 / 0
    assert lock2.finished
    client.acquire(r).release()


def test_lock_context_manager_completed_inside(client):
    r = rname()
    with client.lock(r) as lock:
        lock.complete(keep_ms=5000)
    with pytest.raises(DoneError):
        client.acquire(r)


def test_lock_context_manager_expired_raises(client):
    with pytest.raises(NotHeldError):
        with client.lock(rname(), ttl_ms=50):
            time.sleep(0.3)


def test_session_release_on_close(sock):
    r = rname()
    a = RedlockClient(sock)
    lock = a.acquire(r, ttl_ms=60000)
    with RedlockClient(sock) as b:
        with pytest.raises(BusyError):
            b.acquire(r)
        a.close()
        assert lock.lost.is_set() and lock.lost_reason == "client closed"
        t0 = time.monotonic()
        got = b.acquire(r, wait_ms=3000)
        assert time.monotonic() - t0 < 2.0
        b.release(got)
    with pytest.raises(ConnectionLostError):
        a.ping()


def test_close_fails_inflight(client, sock):
    r = rname()
    client.acquire(r)
    other = RedlockClient(sock)
    mine = other.acquire(rname())
    out = {}

    def waiter():
        t0 = time.monotonic()
        try:
            other.acquire(r, wait_ms=20000)
        except Exception as e:
            out["error"] = e
        out["t"] = time.monotonic() - t0

    t = threading.Thread(target=waiter)
    t.start()
    time.sleep(0.3)
    other.close()
    t.join(5)
    assert not t.is_alive()
    assert isinstance(out.get("error"), ConnectionLostError), out
    assert out["t"] < 3.0
    assert mine.lost.is_set()


def test_release_by_token_and_resource(client, sock):
    r = rname()
    lock = client.acquire(r)
    with RedlockClient(sock) as other:
        other.release(lock.token, resource=r)  # another connection
        got = other.acquire(r)
        other.release(got)


def test_request_timeout_releases_late_lock(client, sock):
    r = rname()
    holder = client.acquire(r)
    with RedlockClient(sock, timeout=0.2) as impatient:
        with pytest.raises(RequestTimeoutError) as ei:
            impatient.acquire(r, wait_ms=3000, timeout=0.3)
        assert isinstance(ei.value, TimeoutError)
        # The daemon keeps waiting for it; when it wins, the client gives
        # the late lock back at once.
        client.release(holder)
        with RedlockClient(sock) as third:
            got = third.acquire(r, wait_ms=5000)
            third.release(got)
        assert impatient.ping()


def test_request_passthrough(client):
    pong = client.request("ping")
    assert pong["ok"] is True and isinstance(pong["id"], int)
    res = client.request("acquire", resource=rname(), ttl_ms=1000)
    assert res["ok"] is True and TOKEN.match(res["lock"])


def test_default_socket_path(monkeypatch, sock):
    monkeypatch.setenv("REDLOCKD_SOCKET", sock)
    with RedlockClient() as c:
        assert c.path == sock
        assert c.ping()
    # An empty path is no path, as an empty REDLOCKD_SOCKET is (and as in
    # the Go and Node clients): not a connect to "".
    assert RedlockClient("").path == sock
    monkeypatch.setenv("REDLOCKD_SOCKET", "")
    assert RedlockClient().path == "./redlockd.sock"
    monkeypatch.delenv("REDLOCKD_SOCKET")
    assert RedlockClient().path == "./redlockd.sock"


def test_connect_error(tmp_path):
    c = RedlockClient(str(tmp_path / "nope.sock"))
    with pytest.raises(ConnectionLostError):
        c.ping()
    assert isinstance(ConnectionLostError(), ConnectionError)
