"""rl.py: the one test harness of redlockd's Python suites.

The integration, fault, soak, end-to-end, docker and container suites and
the Python and redlockctl clients' tests all import this module (each puts
tests/harness on sys.path), so that redis-servers and daemons are started,
waited for and cleaned up one way.
Standard library only. It holds:
  - popen / reap: children registered for cleanup at exit, each dying with
    the test process (PR_SET_PDEATHSIG);
  - free_tcp_port(s), rname, poll_until: loopback ports, random names,
    bounded waits;
  - Resp: a tiny RESP client that talks to one redis-server over its unix
    socket (PING, GET, PTTL, KEYS, SET ...), no redis-py;
  - RedisNode / Cluster: real redis-server children in a temp dir (unix
    socket, optional 127.0.0.1 TCP port, password, AOF), with pause
    (SIGSTOP), resume (SIGCONT), kill -9 and restart on the same path;
  - Daemon: one redlockd process, started against a Cluster (or any object
    with a .dir), waited for until it answers and every node is up, stopped
    with SIGTERM (its exit code and time are checked by the caller);
  - Client: an NDJSON client (one JSON object per line) with pipelining,
    responses matched by "id" and unsolicited {"event":..} lines collected;
  - HttpConn / http: a raw HTTP/1.1 client (keep-alive, pipelining), and
    parse_metrics / scrape / metric: the Prometheus text, parsed strictly.

Every loop here is bounded in count and time and every socket has a
timeout. Every child process is registered so that it is killed at exit even
when a test or the interpreter fails half way.

This module (and every test module) imports with plain python3: when pytest
is missing, `pytest` below is a stub whose decorators do nothing.
`python3 tests/harness/rl.py` runs a smoke test of the node fixture alone.
"""

import atexit
import concurrent.futures
import ctypes
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

try:  # pragma: no cover - depends on the interpreter
    import pytest  # noqa: F401
except ImportError:  # plain python3 without pytest: make imports work

    class _Anything:
        """Stands in for pytest: any attribute, any call, any decorator."""

        def __getattr__(self, name):
            return _Anything()

        def __call__(self, *args, **kwargs):
            if len(args) == 1 and callable(args[0]) and not kwargs:
                return args[0]
            return _Anything()

    pytest = _Anything()


REPO = Path(__file__).resolve().parents[2]
BIN = Path(os.environ.get("REDLOCKD_BIN",
                          str(REPO / "build" / "sidecar" / "redlockd")))
REDIS_SERVER = os.environ.get("REDIS_SERVER", "redis-server")
SANITIZED = os.environ.get("REDLOCKD_SANITIZED", "") not in ("", "0")
# Multiplier for every "generous" time bound; sanitizer builds are slower.
SLOW = 3.0 if SANITIZED else 1.0
KEEP_TMP = os.environ.get("REDLOCKD_KEEP_TMP", "") not in ("", "0")

# A line of valgrind's own output ("==PID== ..."); Daemon.stderr_tail puts
# the memcheck report first.
_VG_LINE = re.compile(r"^==\d+==")
VG_REPORT_LINES = 200

PREFIX = "redlock:"
TOKEN_RE = re.compile(r"^[0-9a-f]{32}$")

# Every child we start, so that atexit can kill whatever is left.
_CHILDREN = set()
# Daemons that are running now; conftest prints their stderr on failure.
LIVE_DAEMONS = []


def _kill_leftovers():
    for p in list(_CHILDREN):
        try:
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)
                p.kill()
                p.wait(timeout=5)
        except Exception:
            pass
        _CHILDREN.discard(p)


atexit.register(_kill_leftovers)


try:  # loaded once here, so the child after fork() only makes one call
    _LIBC = ctypes.CDLL("libc.so.6", use_errno=True)
    _PRCTL = _LIBC.prctl
except (OSError, AttributeError):
    _PRCTL = None


def _die_with_parent():
    """preexec_fn: the child gets SIGKILL if the test process dies."""
    if _PRCTL is not None:
        _PRCTL(1, 9)  # PR_SET_PDEATHSIG, SIGKILL


def popen(argv, **kw):
    """subprocess.Popen registered for cleanup at exit. From the main thread
    only, the child also dies with us (PDEATHSIG follows the forking thread,
    so a worker thread's children would die when that thread ends)."""
    if threading.current_thread() is threading.main_thread():
        kw.setdefault("preexec_fn", _die_with_parent)
    p = subprocess.Popen(argv, **kw)
    _CHILDREN.add(p)
    return p


def reap(p, timeout=5.0):
    """Kills p (if still running) and forgets it."""
    try:
        if p.poll() is None:
            p.send_signal(signal.SIGCONT)
            p.kill()
            p.wait(timeout=timeout)
    finally:
        _CHILDREN.discard(p)


# Listening ports come from below the kernel's ephemeral range (32768 and
# up by default), where port 0 would pick them: there, any outgoing
# connection of any process (every client of a TCP node) may take the port
# as its source port between our choosing it and a server binding it.
LISTEN_PORTS = range(20000, 32768)


def free_tcp_ports(n):
    """n distinct loopback TCP ports that were free a moment ago (held open
    together while chosen, so they differ), drawn at random from
    LISTEN_PORTS."""
    socks = []
    try:
        for port in random.sample(LISTEN_PORTS, len(LISTEN_PORTS)):
            if len(socks) == n:
                break
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                s.close()
                continue
            socks.append(s)
        if len(socks) < n:
            raise RuntimeError("fewer than %d free loopback ports in %s" %
                               (n, LISTEN_PORTS))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def free_tcp_port():
    """A loopback port that was free a moment ago."""
    return free_tcp_ports(1)[0]


def rname(tag="r"):
    """A distinct, random resource name so tests never collide."""
    return "%s-%s" % (tag, uuid.uuid4().hex[:12])


def lock_key(resource):
    if isinstance(resource, str):
        resource = resource.encode()
    return PREFIX.encode() + b"lock:" + resource


def poll_until(fn, timeout, interval=0.02, what="condition"):
    """Calls fn() until it returns a truthy value or timeout seconds pass.
    Returns (value, seconds taken); value is the last falsy one on timeout."""
    start = time.monotonic()
    deadline = start + timeout
    n = 0
    val = None
    while n < 100000:
        n += 1
        val = fn()
        if val:
            return val, time.monotonic() - start
        if time.monotonic() >= deadline:
            break
        time.sleep(interval)
    return val, time.monotonic() - start


def wait_for(pred, bound, what, step=0.05, tolerate=(OSError, ValueError)):
    """Calls pred() until it returns a truthy value, which it returns; an
    exception of a tolerate class counts as not yet. Raises AssertionError
    naming what (and the last such exception) after bound seconds."""
    deadline = time.monotonic() + bound
    last = None
    for _ in range(1000000):
        try:
            v = pred()
            if v:
                return v
        except tolerate as e:
            last = e
        if time.monotonic() >= deadline:
            break
        time.sleep(step)
    raise AssertionError("timed out after %.1fs waiting for %s (last: %r)"
                         % (bound, what, last))


# --------------------------------------------------------------------------
# Connections


def unix_socket(path, timeout, connect=True):
    """A unix stream socket with timeout, connected to path (closed again
    when the connect fails)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    if connect:
        try:
            sock.connect(str(path))
        except Exception:
            sock.close()
            raise
    return sock


class SockOwner:
    """close() and the with statement for a client holding self.sock."""

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# --------------------------------------------------------------------------
# RESP


class RespError(Exception):
    """A Redis error reply (-ERR ...)."""


def _resp_encode(args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        if isinstance(a, int):
            a = str(a)
        if isinstance(a, str):
            a = a.encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


class Resp(SockOwner):
    """One RESP connection to a redis-server unix socket."""

    def __init__(self, path, timeout=2.0, password=None):
        self.sock = unix_socket(path, timeout)
        self.buf = b""
        if password is not None:
            try:
                self.cmd("AUTH", password)
            except Exception:
                self.sock.close()
                raise

    def _fill(self):
        data = self.sock.recv(65536)
        if not data:
            raise ConnectionError("redis closed the connection")
        self.buf += data

    def _line(self):
        for _ in range(10000):
            i = self.buf.find(b"\r\n")
            if i >= 0:
                line, self.buf = self.buf[:i], self.buf[i + 2:]
                return line
            self._fill()
        raise ConnectionError("RESP line too long")

    def _exact(self, n):
        for _ in range(100000):
            if len(self.buf) >= n + 2:
                data, self.buf = self.buf[:n], self.buf[n + 2:]
                return data
            self._fill()
        raise ConnectionError("RESP bulk too long")

    def _reply(self, depth=0):
        if depth > 32:
            raise ConnectionError("RESP nesting too deep")
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            return RespError(rest.decode(errors="replace"))
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self._exact(n)
        if kind == b"*":
            n = int(rest)
            if n < 0:
                return None
            return [self._reply(depth + 1) for _ in range(n)]
        raise ConnectionError("bad RESP reply %r" % line[:80])

    def cmd(self, *args):
        """Sends one command; returns the reply (bytes for bulk strings).
        Raises RespError on an error reply."""
        self.sock.sendall(_resp_encode(args))
        r = self._reply()
        if isinstance(r, RespError):
            raise r
        return r


def resp_cmd(path, *args, timeout=2.0, password=None):
    with Resp(path, timeout=timeout, password=password) as r:
        return r.cmd(*args)


def resp_ping(path, timeout=0.5, password=None):
    """True when the redis-server on path answers PING with PONG."""
    try:
        with Resp(path, timeout=timeout, password=password) as r:
            return r.cmd("PING") == "PONG"
    except (OSError, ConnectionError, RespError):
        return False


# --------------------------------------------------------------------------
# Redis nodes


PAUSED = "<paused: not asked>"


def need_redis(nodes, version, what):
    """Skips the test unless every node speaks Redis `version` (a tuple,
    such as (6, 2)) or later; `what` names the feature that needs it. The
    compat suite runs the tests on older servers too."""
    old = ["%s %s" % (nd.name, ".".join(map(str, v)))
           for nd, v in ((nd, nd.redis_version()) for nd in nodes)
           if v < tuple(version)]
    if old:
        pytest.skip("%s needs Redis %s or later (%s)" % (
            what, ".".join(map(str, version)), ", ".join(old)))


def need_acl_channels(nodes):
    """Skips the test on nodes older than Redis 6.2, whose ACL rules have
    no channels (resetchannels, &pattern): the documented user has them."""
    need_redis(nodes, (6, 2), "an ACL user with channel rules")


class RedisNode:
    """One redis-server child on DIR/<name>.sock (name defaults to nK).
    With tcp_port it also listens on 127.0.0.1:tcp_port and uri names that
    (the tests still talk to it over the unix socket); with password it
    requires AUTH; with aof it writes an append-only file (appendfsync
    always) into data_dir and uri asks the daemon to treat it as persistent.
    env: the child's environment (None: ours). tcp_port="free" picks a free
    port, and another one when a first start finds it taken meanwhile.
    socket_perm: the unix socket's mode ("777" for a client of another
    uid, such as a container's user)."""

    def __init__(self, dir_, k, password=None, tcp_port=0, name=None,
                 aof=False, data_dir=None, env=None, socket_perm="700"):
        self.dir = Path(dir_)
        self.k = k
        self.name = name or "n%d" % k
        self.path = self.dir / ("%s.sock" % self.name)
        self.log = self.dir / ("%s.log" % self.name)
        # A directory of its own: nodes that start at once (Cluster.start)
        # must not share an AOF manifest.
        self.data_dir = (Path(data_dir) if data_dir is not None
                         else self.dir / ("%s.d" % self.name))
        self.proc = None
        self.paused = False
        self.password = password
        self.free_port = tcp_port == "free"
        self.tcp_port = free_tcp_port() if self.free_port else tcp_port
        self.started = False
        self.aof = aof
        self.env = env
        self.socket_perm = socket_perm

    @property
    def uri(self):
        persistent = "?persistent=1" if self.aof else ""
        if self.tcp_port:
            auth = ":%s@" % self.password if self.password else ""
            return "redis://%s127.0.0.1:%d%s" % (auth, self.tcp_port,
                                                 persistent)
        return "unix://%s%s" % (self.path, persistent)

    @property
    def port(self):
        return self.tcp_port

    def start(self, timeout=10.0, extra=()):
        """extra: more redis-server arguments (config directives)."""
        for attempt in range(5):
            try:
                self._start_once(timeout, extra)
                self.started = True
                return self
            except RuntimeError as e:
                if (not self.free_port or self.started or attempt == 4 or
                        "already in use" not in str(e)):
                    raise
                self.pick_port()

    def pick_port(self):
        """Another free port, for a first start that found its taken."""
        self.tcp_port = free_tcp_port()

    def server_args(self):
        """More redis-server arguments of this kind of node, built at each
        start (a subclass's TLS port and certificates)."""
        return []

    def _start_once(self, timeout, extra):
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass
        self.data_dir.mkdir(parents=True, exist_ok=True)
        argv = [REDIS_SERVER, "--port", str(self.tcp_port),
                "--unixsocket", str(self.path),
                "--unixsocketperm", self.socket_perm,
                "--save", "", "--daemonize", "no",
                "--dir", str(self.data_dir), "--logfile", str(self.log)]
        if self.aof:
            argv += ["--appendonly", "yes", "--appendfsync", "always"]
        else:
            argv += ["--appendonly", "no"]
        if self.tcp_port:
            argv += ["--bind", "127.0.0.1"]
        if self.password:
            argv += ["--requirepass", self.password]
        argv += self.server_args() + list(extra)
        self.proc = popen(argv, stdin=subprocess.DEVNULL,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                          env=self.env)
        self.paused = False
        deadline = time.monotonic() + timeout
        for _ in range(5000):
            if self.proc.poll() is not None:
                raise RuntimeError("redis-server %s exited %s: %s" % (
                    self.name, self.proc.returncode, self.log_tail()))
            if resp_ping(self.path, password=self.password):
                return self
            if time.monotonic() > deadline:
                break
            time.sleep(0.01)
        raise RuntimeError("redis-server %s did not answer PING within "
                           "%.0fs: %s" % (self.name, timeout, self.log_tail()))

    def log_tail(self, n=20):
        try:
            return "\n".join(self.log.read_text(errors="replace")
                             .splitlines()[-n:])
        except OSError:
            return "(no log)"

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def turn_aof_on(self, timeout=10.0 * SLOW):
        """Turns the AOF on (appendfsync always) on the running node and
        waits until it is written: a node killed while its first rewrite
        still runs comes back without the keys it had. Its restarts keep it
        on and its URI says ?persistent=1 from now on."""
        self.cmd("CONFIG", "SET", "appendfsync", "always")
        self.cmd("CONFIG", "SET", "appendonly", "yes")
        self.aof = True
        deadline = time.monotonic() + timeout
        info = b""
        for _ in range(100000):
            info = self.cmd("INFO", "persistence")
            if (b"aof_enabled:1" in info and
                    b"aof_rewrite_in_progress:0" in info and
                    b"aof_rewrite_scheduled:0" in info):
                return
            if time.monotonic() > deadline:
                break
            time.sleep(0.02)
        raise RuntimeError("%s: AOF not on within %.0fs: %r" % (
            self.name, timeout, info))

    def pause(self):
        """SIGSTOP: the node keeps its socket but answers nothing."""
        if self.alive():
            self.proc.send_signal(signal.SIGSTOP)
        self.paused = True

    def resume(self):
        if self.alive():
            self.proc.send_signal(signal.SIGCONT)
        self.paused = False

    def kill9(self):
        """kill -9: the socket file stays, connections drop. A node that is
        not running is only forgotten."""
        if self.alive():
            self.proc.send_signal(signal.SIGKILL)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        if self.proc is not None:
            reap(self.proc)
        self.paused = False

    def restart(self, extra=(), timeout=10.0):
        """A fresh redis-server on the same socket path (empty, unless its
        append-only file brings the data back)."""
        self.kill9()
        return self.start(timeout=timeout, extra=extra)

    def restart_on_free_port(self, extra=(), timeout=10.0):
        """A fresh redis-server that also listens on a new free loopback
        port (another one if that port is taken before the node binds it,
        as on a first start)."""
        self.kill9()
        self.free_port = True
        self.started = False
        self.pick_port()
        return self.start(timeout=timeout, extra=extra)

    def stop(self):
        if self.proc is not None:
            reap(self.proc)
        self.paused = False

    def cmd(self, *args, timeout=2.0):
        return resp_cmd(self.path, *args, timeout=timeout,
                        password=self.password)

    def redis_version(self):
        """(major, minor, patch) of the node's redis_version: the Redis it
        speaks (Valkey gives the Redis release it is compatible with)."""
        m = re.search(rb"^redis_version:(\d+)\.(\d+)\.(\d+)",
                      self.cmd("INFO", "server"), re.M)
        return tuple(int(x) for x in m.groups()) if m else (0, 0, 0)


class Cluster:
    """n redis-servers in a fresh temp dir (or dir_, which stays). stop()
    always cleans up. node_kw: RedisNode's keywords for every node."""

    def __init__(self, n=5, dir_=None, **node_kw):
        self.own_dir = dir_ is None
        self.dir = Path(dir_ or tempfile.mkdtemp(prefix="rlit-"))
        self.nodes = [RedisNode(self.dir, k + 1, **node_kw)
                      for k in range(n)]

    def start(self):
        """Starts every node at once: the daemon quarantines a node without
        persistence that started over 3 s after another (it may have lost
        locks), and one after the other they can be that far apart on a
        loaded machine."""
        try:
            with concurrent.futures.ThreadPoolExecutor(len(self.nodes)) as ex:
                for f in [ex.submit(nd.start) for nd in self.nodes]:
                    f.result()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self):
        for nd in self.nodes:
            try:
                nd.resume()
            except Exception:
                pass
        for nd in self.nodes:
            try:
                nd.stop()
            except Exception:
                pass
        if self.own_dir and not KEEP_TMP:
            shutil.rmtree(self.dir, ignore_errors=True)

    def resume_all(self):
        for nd in self.nodes:
            nd.resume()

    def uris(self):
        return [nd.uri for nd in self.nodes]

    def node_args(self):
        out = []
        for u in self.uris():
            out += ["--node", u]
        return out

    # What is on every node. A dead node is reported as the exception it
    # raised and a paused one as PAUSED (not asked), so asserts show it.

    def each(self, *args, timeout=2.0):
        out = []
        for nd in self.nodes:
            if nd.paused:  # would only time out
                out.append(PAUSED)
                continue
            try:
                out.append(nd.cmd(*args, timeout=timeout))
            except (OSError, ConnectionError, RespError) as e:
                out.append(e)
        return out

    def get_all(self, key):
        return self.each("GET", key)

    def pttl_all(self, key):
        return self.each("PTTL", key)

    def keys_all(self, pattern):
        """KEYS pattern on every node, each as a sorted list of bytes."""
        res = self.each("KEYS", pattern)
        return [sorted(r) if isinstance(r, list) else r for r in res]

    def lock_keys_all(self):
        return self.keys_all(PREFIX + "lock:*")


# --------------------------------------------------------------------------
# NDJSON client


class Closed(Exception):
    """The daemon closed the connection while we waited for a line."""


class Client(SockOwner):
    """NDJSON over the daemon's unix socket.

    send(obj) writes one line; read_msg() returns the next parsed line (events
    included); response(id) returns the response carrying that id, keeping
    other responses in self.pending and events in self.events; call()/request()
    do both with an automatic id; pipeline() writes many lines in one sendall
    and collects every response by id."""

    _ids = 0

    def __init__(self, path, timeout=5.0, connect=True):
        self.path = str(path)
        self.timeout = timeout
        self.buf = b""
        self.eof = False
        self.events = []
        self.pending = {}  # id key -> list of responses not yet claimed
        self.sock = unix_socket(self.path, timeout, connect)

    @classmethod
    def next_id(cls):
        cls._ids += 1
        return "t%d" % cls._ids

    @staticmethod
    def key(id_):
        return json.dumps(id_, sort_keys=True)

    # -- writing

    @staticmethod
    def encode(obj):
        return json.dumps(obj, separators=(",", ":"),
                          ensure_ascii=False).encode() + b"\n"

    def send(self, obj):
        self.sock.sendall(self.encode(obj))

    def send_raw(self, data):
        self.sock.sendall(data)

    def send_raw_quiet(self, data):
        """sendall that tolerates the daemon closing on us half way (it may
        answer an oversized line and close before we finish writing)."""
        try:
            self.sock.sendall(data)
            return True
        except (BrokenPipeError, ConnectionResetError):
            return False
        except socket.timeout:
            return False

    # -- reading

    def _recv(self, deadline):
        left = deadline - time.monotonic()
        if left <= 0:
            raise socket.timeout("no line within the timeout")
        self.sock.settimeout(left)
        try:
            data = self.sock.recv(262144)
        except ConnectionResetError:
            data = b""
        finally:
            self.sock.settimeout(self.timeout)
        if not data:
            self.eof = True
        self.buf += data
        return data

    def read_line(self, timeout=None):
        """The next line (bytes, without newline). Raises Closed at EOF and
        socket.timeout when nothing comes in time."""
        deadline = time.monotonic() + (self.timeout if timeout is None
                                       else timeout)
        for _ in range(1000000):
            i = self.buf.find(b"\n")
            if i >= 0:
                line, self.buf = self.buf[:i], self.buf[i + 1:]
                return line
            if self.eof:
                raise Closed("connection closed (partial %r)" % self.buf[:200])
            self._recv(deadline)
        raise socket.timeout("line loop bound")

    def read_msg(self, timeout=None):
        """The next line parsed as JSON (an object)."""
        line = self.read_line(timeout)
        try:
            msg = json.loads(line)
        except ValueError:
            raise AssertionError("daemon sent a line that is not JSON: %r"
                                 % line[:300])
        assert isinstance(msg, dict), "daemon sent a non-object: %r" % line
        return msg

    def _stash(self, msg):
        if "event" in msg and "id" not in msg:
            self.events.append(msg)
        else:
            k = self.key(msg["id"]) if "id" in msg else None
            self.pending.setdefault(k, []).append(msg)

    def response(self, id_, timeout=None):
        """The response whose "id" equals id_ (None: the first one without
        an id)."""
        k = self.key(id_) if id_ is not None else None
        deadline = time.monotonic() + (self.timeout if timeout is None
                                       else timeout)
        for _ in range(1000000):
            lst = self.pending.get(k)
            if lst:
                msg = lst.pop(0)
                if not lst:
                    del self.pending[k]
                return msg
            left = deadline - time.monotonic()
            if left <= 0:
                raise socket.timeout("no response for id %r" % (id_,))
            self._stash(self.read_msg(left))
        raise socket.timeout("response loop bound")

    def request(self, obj, timeout=None):
        """Sends obj (adding an id when it has none) and returns its
        response."""
        obj = dict(obj)
        if "id" not in obj:
            obj["id"] = self.next_id()
        self.send(obj)
        return self.response(obj["id"], timeout)

    def call(self, op, timeout=None, **fields):
        return self.request(dict(op=op, **fields), timeout)

    def wait_event(self, timeout=None):
        """The next unsolicited {"event":..} message."""
        deadline = time.monotonic() + (self.timeout if timeout is None
                                       else timeout)
        for _ in range(1000000):
            if self.events:
                return self.events.pop(0)
            left = deadline - time.monotonic()
            if left <= 0:
                raise socket.timeout("no event")
            self._stash(self.read_msg(left))
        raise socket.timeout("event loop bound")

    def pipeline(self, objs, timeout=10.0):
        """Writes every obj (each must carry a distinct "id") in ONE sendall
        and reads until each id is answered. Returns (answers, extra): answers
        maps id key -> list of responses (a correct daemon gives exactly one
        each); extra is anything else read (events, unknown ids)."""
        keys = [self.key(o["id"]) for o in objs]
        assert len(set(keys)) == len(keys), "pipeline ids must be distinct"
        self.sock.sendall(b"".join(self.encode(o) for o in objs))
        want = set(keys)
        answers = {k: [] for k in keys}
        extra = []
        deadline = time.monotonic() + timeout
        for _ in range(len(objs) * 10 + 100):
            if not want:
                break
            left = deadline - time.monotonic()
            if left <= 0:
                break
            msg = self.read_msg(left)
            k = self.key(msg["id"]) if "id" in msg else None
            if k in answers:
                answers[k].append(msg)
                want.discard(k)
            else:
                extra.append(msg)
        return answers, extra

    def read_until_closed(self, timeout=None):
        """Reads lines until EOF; returns them. Raises socket.timeout if the
        daemon keeps the connection open."""
        deadline = time.monotonic() + (self.timeout if timeout is None
                                       else timeout)
        lines = self.lines_before_close = []
        for _ in range(100000):
            try:
                lines.append(self.read_line(max(0.0, deadline -
                                                time.monotonic())))
            except Closed:
                return lines
            except socket.timeout:
                raise socket.timeout("still open after %.1fs; lines read: %r"
                                     % (timeout if timeout is not None
                                        else self.timeout, lines[:5]))
        raise socket.timeout("too many lines before close")

    def is_closed(self, timeout=1.0):
        """True when the daemon closes the connection within timeout (lines
        that arrive first are dropped)."""
        try:
            self.read_until_closed(timeout)
            return True
        except socket.timeout:
            return False


def err_code(rsp):
    """The error code of a failure response, None for success."""
    if rsp.get("ok") is True:
        return None
    e = rsp.get("error")
    return e.get("code") if isinstance(e, dict) else "<no error object>"


def assert_error(rsp, code, field=None):
    """Asserts rsp is a well-formed failure with code (and, when field is
    given, a message that names it)."""
    assert rsp.get("ok") is False, "expected error %s, got %r" % (code, rsp)
    e = rsp.get("error")
    assert isinstance(e, dict), "error is not an object: %r" % rsp
    assert e.get("code") == code, "expected code %s, got %r" % (code, rsp)
    assert isinstance(e.get("message"), str) and e["message"], (
        "error message missing: %r" % rsp)
    if field is not None:
        assert field in e["message"], (
            "message should name %r: %r" % (field, rsp))


def assert_ok(rsp, what=""):
    assert rsp.get("ok") is True, "expected ok for %s, got %r" % (what, rsp)
    assert "error" not in rsp, rsp


# --------------------------------------------------------------------------
# HTTP/1.1 over the daemon's socket, and its /metrics


class HttpResponse:
    def __init__(self, status, reason, headers, body, raw_head):
        self.status = status
        self.reason = reason
        self.headers = headers  # lower-case name -> value (last wins)
        self.body = body
        self.raw_head = raw_head

    def json(self):
        try:
            return json.loads(self.body)
        except ValueError:
            raise AssertionError("HTTP body is not JSON: %r" % self.body[:300])

    def __repr__(self):
        return "<HTTP %d %r %r>" % (self.status, self.headers,
                                    self.body[:300])


_STATUS_RE = re.compile(rb"^HTTP/1\.[01] (\d{3})(?: (.*))?$")


def _parse_head(head):
    lines = head.split(b"\r\n")
    m = _STATUS_RE.match(lines[0])
    assert m, "bad HTTP status line %r" % lines[0][:200]
    headers = {}
    for ln in lines[1:]:
        if not ln:
            continue
        name, sep, value = ln.partition(b":")
        assert sep, "bad HTTP header line %r" % ln[:200]
        headers[name.strip().lower().decode()] = value.strip().decode(
            errors="replace")
    return int(m.group(1)), (m.group(2) or b"").decode(errors="replace"), \
        headers


def parse_one(buf):
    """(response, rest) for the first complete response in buf, or
    (None, buf) when it is incomplete. 1xx responses have no body."""
    i = buf.find(b"\r\n\r\n")
    if i < 0:
        return None, buf
    head = buf[:i]
    status, reason, headers = _parse_head(head)
    rest = buf[i + 4:]
    if 100 <= status < 200:
        return HttpResponse(status, reason, headers, b"", head), rest
    n = int(headers.get("content-length", "0"))
    if len(rest) < n:
        return None, buf
    return HttpResponse(status, reason, headers, rest[:n], head), rest[n:]


def parse_responses(data):
    """Every response in data, in order (a trailing partial one raises)."""
    out = []
    for _ in range(10000):
        if not data:
            return out
        r, data = parse_one(data)
        assert r is not None, "incomplete HTTP response: %r" % data[:300]
        out.append(r)
    raise AssertionError("too many responses")


class HttpConn(SockOwner):
    """One keep-alive HTTP/1.1 connection (unix path or (host, port))."""

    def __init__(self, addr, timeout=5.0):
        self.timeout = timeout
        if isinstance(addr, tuple):
            self.sock = socket.create_connection(addr, timeout=timeout)
        else:
            self.sock = unix_socket(addr, timeout)
        self.buf = b""
        self.eof = False

    @staticmethod
    def build(method, path, body=None, headers=None, host="localhost"):
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
        elif isinstance(body, str):
            body = body.encode()
        h = {"Host": host}
        if body is not None:
            h["Content-Type"] = "application/json"
            h["Content-Length"] = str(len(body))
        h.update(headers or {})
        head = "%s %s HTTP/1.1\r\n" % (method, path)
        head += "".join("%s: %s\r\n" % kv for kv in h.items() if kv[1]
                        is not None)
        return head.encode() + b"\r\n", (body or b"")

    def send_raw(self, data):
        self.sock.sendall(data)

    def read_response(self, timeout=None):
        deadline = time.monotonic() + (timeout or self.timeout)
        for _ in range(100000):
            r, rest = parse_one(self.buf)
            if r is not None:
                self.buf = rest
                return r
            if self.eof:
                raise Closed("HTTP connection closed (partial %r)"
                             % self.buf[:200])
            left = deadline - time.monotonic()
            if left <= 0:
                raise socket.timeout("no HTTP response in time (have %r)"
                                     % self.buf[:200])
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(262144)
            except ConnectionResetError:
                data = b""
            if not data:
                self.eof = True
            self.buf += data
        raise socket.timeout("response loop bound")

    def request(self, method, path, body=None, headers=None, timeout=None):
        head, body = self.build(method, path, body, headers)
        self.sock.sendall(head + body)
        r = self.read_response(timeout)
        return r

    def is_closed(self, timeout=1.0):
        """True when the peer closes within timeout (data read is kept)."""
        deadline = time.monotonic() + timeout
        for _ in range(10000):
            if self.eof:
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(65536)
            except socket.timeout:
                return False
            except ConnectionResetError:
                data = b""
            if not data:
                self.eof = True
            self.buf += data
        return False


def http(addr, method, path, body=None, headers=None, timeout=5.0):
    """One request on a fresh connection."""
    with HttpConn(addr, timeout) as h:
        return h.request(method, path, body, headers, timeout)


_SAMPLE_RE = re.compile(
    r'^([a-zA-Z_:][a-zA-Z0-9_:]*)'
    r'(?:\{((?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*"'
    r'(?:,[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*")*,?)?)\})?'
    r' ([-+]?(?:[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?|Inf|NaN))$')
_LABEL_RE = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"')


def parse_metrics(text):
    """{(name, ((label, value), ...)): float}. Asserts every line is a
    comment (# HELP / # TYPE) or `name{labels} value`."""
    out = {}
    for ln in text.split("\n"):
        if ln == "":
            continue
        if ln.startswith("#"):
            assert re.match(r"^# (HELP|TYPE) [a-zA-Z_:][a-zA-Z0-9_:]* ", ln), \
                "bad comment line in /metrics: %r" % ln
            continue
        m = _SAMPLE_RE.match(ln)
        assert m, "unparseable /metrics line: %r" % ln
        labels = tuple(sorted(_LABEL_RE.findall(m.group(2) or "")))
        key = (m.group(1), labels)
        assert key not in out, "duplicate sample in /metrics: %r" % ln
        out[key] = float(m.group(3))
    return out


def scrape(addr):
    """GET /metrics (unix socket path or (host, port)); parsed."""
    r = http(addr, "GET", "/metrics")
    assert r.status == 200, r
    return parse_metrics(r.body.decode())


def metric(m, name, **labels):
    return m.get((name, tuple(sorted(labels.items()))))


def metric_sum(m, name):
    return sum(v for (n, _), v in m.items() if n == name)


# --------------------------------------------------------------------------
# The daemon


def base_daemon_flags():
    flags = ["--log-level", "debug"]
    if SANITIZED:
        flags += ["--node-timeout-ms", "500"]
    return flags


class Daemon:
    """One redlockd process against a cluster, serving on DIR/<name>.sock.

    cluster: a Cluster, or anything with a .dir (then pass node_args).
    flags: the flags after --socket and before extra; None gives
    base_daemon_flags(). Its stdout and stderr go to DIR/<name>.stderr,
    truncated at each start (stderr_mode "ab": appended, one file for every
    run of a restarted daemon)."""

    stderr_mode = "wb"

    def __init__(self, cluster, name="d", extra=(), node_args=None,
                 flags=None):
        self.cluster = cluster
        self.name = name
        self.socket = Path(cluster.dir) / ("%s.sock" % name)
        self.stderr_path = Path(cluster.dir) / ("%s.stderr" % name)
        self.node_args = (cluster.node_args() if node_args is None
                          else list(node_args))
        self.argv = ([str(BIN)] + self.node_args +
                     ["--socket", str(self.socket)] +
                     (base_daemon_flags() if flags is None else list(flags)) +
                     list(extra))
        self.proc = None
        self.exit_code = None
        self.exit_seconds = None
        self._err = None

    @property
    def pid(self):
        return self.proc.pid

    def start(self, wait_nodes=True, timeout=10.0 * SLOW):
        if not BIN.exists():
            raise RuntimeError("redlockd binary not found at %s (build it "
                               "or set REDLOCKD_BIN)" % BIN)
        self._err = open(self.stderr_path, self.stderr_mode)
        self.proc = popen(self.argv, stdin=subprocess.DEVNULL,
                          stdout=self._err, stderr=self._err,
                          **self.popen_kw())
        LIVE_DAEMONS.append(self)
        try:
            self.wait_started(wait_nodes, timeout)
        except BaseException:
            self.kill()
            raise
        return self

    def popen_kw(self):
        """More subprocess.Popen keywords for the child (a subclass's
        preexec_fn or env)."""
        return {}

    def wait_started(self, wait_nodes, timeout):
        """Until it serves: a ping answered, then (wait_nodes) every node
        up."""
        self.wait_ready(timeout)
        if wait_nodes:
            self.wait_all_up(timeout)

    def wait_ready(self, timeout):
        """Until the socket accepts and {"op":"ping"} answers ok."""
        deadline = time.monotonic() + timeout
        last = None
        for _ in range(5000):
            if self.proc.poll() is not None:
                raise RuntimeError("redlockd exited %s at start:\n%s" % (
                    self.proc.returncode, self.stderr_tail()))
            try:
                with Client(self.socket, timeout=1.0) as c:
                    r = c.request({"op": "ping", "id": "ready"})
                    if r.get("ok") is True:
                        return
                    last = r
            except (OSError, Closed, AssertionError, ValueError) as e:
                last = e
            if time.monotonic() > deadline:
                break
            time.sleep(0.02)
        raise RuntimeError("redlockd not ready within %.0fs (%r):\n%s" % (
            timeout, last, self.stderr_tail()))

    def health(self, timeout=2.0):
        with Client(self.socket, timeout=timeout) as c:
            return c.call("health")

    def wait_all_up(self, timeout):
        def all_up():
            h = self.health()
            nodes = h.get("nodes") or []
            return h if nodes and all(n.get("up") is True
                                      for n in nodes) else None
        h, _ = poll_until(all_up, timeout, 0.05)
        if not h:
            raise RuntimeError("not every node up within %.0fs: %r\n%s" % (
                timeout, self.health(), self.stderr_tail()))

    def client(self, timeout=5.0):
        return Client(self.socket, timeout=timeout)

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def rss_kb(self):
        """VmRSS in kB; 0 for a zombie, None when the process is gone."""
        try:
            with open("/proc/%d/status" % self.pid) as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1])
        except OSError:
            return None
        return 0

    def fd_count(self):
        return len(os.listdir("/proc/%d/fd" % self.pid))

    def stop(self, timeout=5.0):
        """SIGTERM; returns (exit code, seconds) or (None, timeout) if it
        had to be killed."""
        if self.proc is None:
            return self.exit_code, self.exit_seconds
        if self.proc.poll() is None:
            t0 = time.monotonic()
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
                self.exit_code = self.proc.returncode
                self.exit_seconds = time.monotonic() - t0
            except subprocess.TimeoutExpired:
                self.kill()
                self.exit_code = None
                self.exit_seconds = timeout
        else:
            self.exit_code = self.proc.returncode
            self.exit_seconds = 0.0
        self._forget()
        return self.exit_code, self.exit_seconds

    def kill(self):
        if self.proc is not None:
            reap(self.proc)
        self._forget()

    def _forget(self):
        if self in LIVE_DAEMONS:
            LIVE_DAEMONS.remove(self)
        _CHILDREN.discard(self.proc)
        if self._err is not None:
            self._err.close()
            self._err = None

    def stderr_text(self):
        try:
            return self.stderr_path.read_text(errors="replace")
        except OSError:
            return ""

    def stderr_tail(self, n=80):
        """The last n lines of the daemon's stderr. Under valgrind
        (tests/valgrind/redlockd-valgrind) the memcheck report, whose first
        error is the one that matters, comes first (up to VG_REPORT_LINES
        lines), then the last n log lines."""
        lines = self.stderr_text().splitlines()
        vg = [ln for ln in lines if _VG_LINE.match(ln)]
        if not vg:
            return "\n".join(lines[-n:])
        log = [ln for ln in lines if not _VG_LINE.match(ln)]
        more = len(vg) - VG_REPORT_LINES
        return "\n".join(
            ["valgrind report (%d lines):" % len(vg)] + vg[:VG_REPORT_LINES] +
            (["... %d more valgrind lines in %s" % (more, self.stderr_path)]
             if more > 0 else []) +
            ["last %d log lines:" % min(n, len(log))] + log[-n:])


def exit_meaning(code):
    """A note for an unexpected exit code: 99 is valgrind's (the
    tests/valgrind wrapper passes --error-exitcode=99)."""
    if code == 99 and "valgrind" in BIN.name:
        return " (valgrind found memory errors or leaks: report below)"
    return ""


def run_bin(args, env=None, timeout=10.0):
    """Runs redlockd to completion (start-up error tests); returns
    CompletedProcess, or raises AssertionError if it is still running."""
    e = dict(os.environ)
    for k in ("REDLOCKD_NODES", "REDLOCKD_SOCKET"):
        e.pop(k, None)
    if env:
        e.update(env)
    try:
        return subprocess.run([str(BIN)] + list(args), env=e,
                              stdin=subprocess.DEVNULL, capture_output=True,
                              timeout=timeout,
                              preexec_fn=(_die_with_parent if
                                          threading.current_thread() is
                                          threading.main_thread() else None))
    except subprocess.TimeoutExpired:
        raise AssertionError("redlockd %r still running after %.0fs" % (
            args, timeout))


if __name__ == "__main__":  # smoke test of the fixture alone
    c = Cluster().start()
    try:
        for nd in c.nodes:
            print(nd.k, nd.path, resp_ping(nd.path))
        c.nodes[0].pause()
        print("paused n1 answers:", resp_ping(c.nodes[0].path, timeout=0.2))
        c.nodes[0].resume()
        print("resumed n1 answers:", resp_ping(c.nodes[0].path))
        c.nodes[1].kill9()
        print("killed n2 answers:", resp_ping(c.nodes[1].path))
        c.nodes[1].restart()
        print("restarted n2 answers:", resp_ping(c.nodes[1].path))
        c.nodes[2].cmd("SET", "k", "v", "PX", "5000")
        print("GET/PTTL:", c.get_all("k"), c.pttl_all("k"))
    finally:
        c.stop()
    print("dir removed:", not c.dir.exists())
    sys.exit(0)
