"""harness.py: processes for the end-to-end Telegram test.

Standard library only. It starts and always stops:
  - five redis-servers on unix sockets in one temp dir (no TCP: --port 0),
  - redlockd daemons on those nodes (each on its own unix socket),
  - bot processes (Node grammY instances, a Python instance).

Every child is started with PR_SET_PDEATHSIG (it gets SIGKILL if the test
process dies) and registered in a Procs object whose stop_all() ends them:
SIGTERM, then SIGKILL after a bound. Every wait here is bounded.
"""

import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BIN = Path(os.environ.get("REDLOCKD_BIN",
                          str(REPO / "build" / "sidecar" / "redlockd")))
REDIS_SERVER = os.environ.get("REDIS_SERVER", "redis-server")
NODE = os.environ.get("NODE", "node")
PREFIX = "redlock:"
# Run against a topology started elsewhere (the container suite's compose
# project) instead of starting redis-servers and daemons here:
# E2E_REDIS_SOCKETS, the five nodes' unix sockets, comma separated;
# E2E_REDLOCKD_SOCKETS, "A=PATH,B=PATH", the two daemons' sockets.
EXTERNAL_REDIS = [p for p in os.environ.get("E2E_REDIS_SOCKETS",
                                            "").split(",") if p]
EXTERNAL_DAEMONS = dict(kv.split("=", 1) for kv in os.environ.get(
    "E2E_REDLOCKD_SOCKETS", "").split(",") if "=" in kv)

try:
    _PRCTL = ctypes.CDLL("libc.so.6", use_errno=True).prctl
except (OSError, AttributeError):  # pragma: no cover
    _PRCTL = None


def _die_with_parent():
    if _PRCTL is not None:
        _PRCTL(1, 9)  # PR_SET_PDEATHSIG, SIGKILL


def poll_until(fn, timeout, interval=0.01):
    """fn() until truthy or timeout seconds; returns (value, seconds)."""
    start = time.monotonic()
    val = None
    for _ in range(1000000):
        val = fn()
        if val or time.monotonic() - start >= timeout:
            break
        time.sleep(interval)
    return val, time.monotonic() - start


class Proc:
    def __init__(self, name, popen, log_path):
        self.name = name
        self.popen = popen
        self.log_path = log_path

    @property
    def pid(self):
        return self.popen.pid

    def alive(self):
        return self.popen.poll() is None

    def log_tail(self, n=40):
        try:
            with open(self.log_path, "rb") as f:
                lines = f.read().decode("utf-8", "replace").splitlines()
            return "\n".join(lines[-n:])
        except OSError:
            return "(no log)"


class Procs:
    """Registry of children; stop_all() ends every one of them."""

    def __init__(self, workdir):
        self.dir = Path(workdir)
        self.procs = []

    def spawn(self, name, argv, env=None, cwd=None):
        log_path = self.dir / ("%s.log" % name)
        log = open(log_path, "ab")
        try:
            p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                 stderr=subprocess.STDOUT, env=env, cwd=cwd,
                                 preexec_fn=_die_with_parent)
        finally:
            log.close()
        proc = Proc(name, p, log_path)
        self.procs.append(proc)
        return proc

    def stop(self, proc, timeout=5.0):
        """SIGTERM, wait up to timeout, then SIGKILL. Returns the exit code
        and whether SIGTERM sufficed."""
        p = proc.popen
        if p.poll() is not None:
            return p.returncode, True
        try:
            p.send_signal(signal.SIGCONT)
            p.terminate()
            return p.wait(timeout=timeout), True
        except subprocess.TimeoutExpired:
            p.kill()
            return p.wait(timeout=5), False

    def stop_all(self, timeout=5.0):
        for proc in reversed(self.procs):
            try:
                self.stop(proc, timeout)
            except Exception:
                try:
                    proc.popen.kill()
                except Exception:
                    pass


# -- RESP (just enough for GET/PING on a unix socket) ----------------------

class Resp:
    def __init__(self, path, timeout=2.0):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.buf = b""
        try:
            self.sock.connect(str(path))
        except Exception:
            self.sock.close()
            raise

    def close(self):
        self.sock.close()

    def cmd(self, *args):
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            a = a.encode() if isinstance(a, str) else bytes(a)
            out.append(b"$%d\r\n%s\r\n" % (len(a), a))
        self.sock.sendall(b"".join(out))
        return self._reply()

    def _line(self):
        for _ in range(100000):
            i = self.buf.find(b"\r\n")
            if i >= 0:
                line, self.buf = self.buf[:i], self.buf[i + 2:]
                return line
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("redis closed the connection")
            self.buf += data
        raise ConnectionError("no RESP line")

    def _reply(self):
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            raise RuntimeError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            for _ in range(100000):
                if len(self.buf) >= n + 2:
                    break
                data = self.sock.recv(65536)
                if not data:
                    raise ConnectionError("redis closed the connection")
                self.buf += data
            val, self.buf = self.buf[:n], self.buf[n + 2:]
            return val.decode()
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self._reply() for _ in range(n)]
        raise RuntimeError("bad RESP reply %r" % line)


class Redis:
    """Five redis-servers on DIR/nK.sock."""

    def __init__(self, procs, workdir, n=5):
        self.procs = procs
        self.dir = Path(workdir)
        self.paths = [self.dir / ("n%d.sock" % k) for k in range(n)]
        if EXTERNAL_REDIS:
            self.paths = [Path(p) for p in EXTERNAL_REDIS]
        self.conns = []

    def start(self, timeout=10.0):
        for k, path in enumerate([] if EXTERNAL_REDIS else self.paths):
            self.procs.spawn("redis-n%d" % k, [
                REDIS_SERVER, "--port", "0", "--unixsocket", str(path),
                "--unixsocketperm", "700", "--save", "", "--appendonly", "no",
                "--daemonize", "no", "--dir", str(self.dir)])
        for path in self.paths:
            def up(path=path):
                try:
                    r = Resp(path, 0.5)
                    try:
                        return r.cmd("PING") == "PONG"
                    finally:
                        r.close()
                except OSError:
                    return False
            ok, _ = poll_until(up, timeout)
            if not ok:
                raise RuntimeError("redis-server on %s did not start" % path)
        self.conns = [Resp(p) for p in self.paths]
        return self

    def uris(self):
        return ["unix://%s" % p for p in self.paths]

    def get_all(self, key):
        """GET key on every node (None where a node does not answer)."""
        out = []
        for c in self.conns:
            try:
                out.append(c.cmd("GET", key))
            except (OSError, RuntimeError):
                out.append(None)
        return out

    def close(self):
        for c in self.conns:
            c.close()
        self.conns = []


def lock_key(resource):
    return "%slock:%s" % (PREFIX, resource)


# -- redlockd ---------------------------------------------------------------

def ndjson_call(sock_path, req, timeout=2.0):
    """One request on a fresh NDJSON connection; the answer as a dict."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect(str(sock_path))
        s.sendall((json.dumps(req) + "\n").encode())
        buf = b""
        for _ in range(10000):
            if b"\n" in buf:
                break
            data = s.recv(65536)
            if not data:
                break
            buf += data
        return json.loads(buf.split(b"\n", 1)[0])
    finally:
        s.close()


def http_get(sock_path, path, timeout=2.0):
    """GET path over HTTP/1.1 on the daemon's unix socket: (status, body)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect(str(sock_path))
        s.sendall(("GET %s HTTP/1.1\r\nHost: redlockd\r\n"
                   "Connection: close\r\n\r\n" % path).encode())
        buf = b""
        for _ in range(100000):
            data = s.recv(65536)
            if not data:
                break
            buf += data
    finally:
        s.close()
    head, _, body = buf.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    return status, body.decode("utf-8", "replace")


def metrics(sock_path):
    """The daemon's Prometheus counters as {"name{labels}": value}."""
    status, body = http_get(sock_path, "/metrics")
    out = {}
    if status != 200:
        return out
    for line in body.splitlines():
        if line.startswith("#") or " " not in line:
            continue
        name, _, val = line.rpartition(" ")
        try:
            out[name] = float(val)
        except ValueError:
            pass
    return out


class Daemon:
    def __init__(self, procs, redis, name, workdir):
        self.procs = procs
        self.redis = redis
        self.name = name
        self.socket = Path(workdir) / ("%s.sock" % name)
        self.proc = None
        self.baseline = {}

    def metrics(self):
        """metrics(), less what an external daemon had counted before."""
        now = metrics(self.socket)
        return {k: v - self.baseline.get(k, 0) for k, v in now.items()}

    def start(self, timeout=10.0):
        if self.name in EXTERNAL_DAEMONS:
            self.socket = Path(EXTERNAL_DAEMONS[self.name])
            def healthy():
                try:
                    return ndjson_call(self.socket, {"op": "health"},
                                       1.0).get("ok")
                except (OSError, ValueError):
                    return False
            ok, _ = poll_until(healthy, timeout, 0.1)
            if not ok:
                raise RuntimeError("external redlockd %s at %s is not "
                                   "healthy" % (self.name, self.socket))
            self.baseline = metrics(self.socket)
            return self
        if not BIN.exists():
            raise RuntimeError("redlockd not built at %s (meson setup build "
                               "&& ninja -C build, or set REDLOCKD_BIN)" % BIN)
        argv = [str(BIN)]
        for uri in self.redis.uris():
            argv += ["--node", uri]
        argv += ["--socket", str(self.socket)]
        self.proc = self.procs.spawn("redlockd-%s" % self.name, argv)

        def all_up():
            if not self.proc.alive():
                raise RuntimeError("redlockd %s exited at start:\n%s"
                                   % (self.name, self.proc.log_tail()))
            try:
                h = ndjson_call(self.socket, {"op": "health", "id": 1}, 1.0)
            except (OSError, ValueError):
                return False
            nodes = h.get("nodes") or []
            return bool(nodes) and all(n.get("up") is True for n in nodes)
        ok, _ = poll_until(all_up, timeout, 0.05)
        if not ok:
            raise RuntimeError("redlockd %s not ready with all nodes up:\n%s"
                               % (self.name, self.proc.log_tail()))
        return self


def make_workdir():
    # Short path: unix socket paths are limited to 107 bytes.
    return Path(tempfile.mkdtemp(prefix="rl-e2e-", dir="/tmp"))


def remove_workdir(path, keep=False):
    if not keep:
        shutil.rmtree(path, ignore_errors=True)
