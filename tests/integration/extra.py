"""extra.py: private helpers and fixtures for test_long_held.py,
test_http.py, test_metrics_health.py, test_security.py and test_leader.py.

Standard library only (plus rl.py, used read-only). It adds:
  - HttpConn: a raw HTTP/1.1 client over the daemon's unix socket (or TCP),
    keep-alive, pipelining, Expect: 100-continue;
  - parse_responses(): sequential HTTP/1.1 responses from a byte stream
    (curl -i output, pipelined answers);
  - curl(): runs curl --unix-socket and parses what it printed;
  - parse_metrics() / scrape(): the Prometheus text exposition, strictly;
  - XDaemon: a Daemon that can start with a umask, raised RLIMIT_NOFILE,
    a custom readiness check (--allow-uid refuses our own ping);
  - PwRedis: a redis-server with --requirepass, on a unix socket and/or a
    TCP port on 127.0.0.1;
  - fixtures: xdaemons (cleanup of XDaemons), pw_redis (password nodes).

Every loop is bounded and every socket has a timeout.
"""

import json
import os
import re
import resource
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import rl
from rl import (LIVE_DAEMONS, REDIS_SERVER, SLOW, Client, Closed, Daemon,
                Resp, RespError, poll_until, pytest)

CURL = shutil.which("curl")


def free_port():
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
    finally:
        s.close()


# --------------------------------------------------------------------------
# HTTP


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


class HttpConn:
    """One keep-alive HTTP/1.1 connection (unix path or (host, port))."""

    def __init__(self, addr, timeout=5.0):
        self.timeout = timeout
        if isinstance(addr, tuple):
            self.sock = socket.create_connection(addr, timeout=timeout)
        else:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.settimeout(timeout)
            try:
                self.sock.connect(str(addr))
            except Exception:
                self.sock.close()
                raise
        self.buf = b""
        self.eof = False

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

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


def curl(sock, *args, timeout=15.0, verbose=False):
    """curl -s -i --unix-socket SOCK ARGS...; returns (responses, completed
    process). URLs are http://localhost/..."""
    if CURL is None:
        pytest.skip("curl not installed")
    argv = [CURL, "-s", "-i", "--max-time", str(int(timeout))]
    if verbose:
        argv.append("-v")
    if sock is not None:
        argv += ["--unix-socket", str(sock)]
    argv += list(args)
    p = subprocess.run(argv, capture_output=True, timeout=timeout + 5,
                       stdin=subprocess.DEVNULL)
    try:
        rs = parse_responses(p.stdout)
    except AssertionError as e:
        raise AssertionError("%s; curl %r rc=%d stderr=%r" % (
            e, args, p.returncode, p.stderr[-500:]))
    return rs, p


def curl1(sock, *args, **kw):
    """One final response (a 100 Continue before it is skipped)."""
    rs, p = curl(sock, *args, **kw)
    final = [r for r in rs if r.status >= 200]
    assert len(final) == 1, "expected one response from curl %r, got %r " \
        "(rc=%d, stderr %r)" % (args, rs, p.returncode, p.stderr[-300:])
    return final[0]


# --------------------------------------------------------------------------
# Metrics

_SAMPLE_RE = re.compile(
    r'^([a-zA-Z_:][a-zA-Z0-9_:]*)'
    r'(?:\{((?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*"'
    r'(?:,[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*")*,?)?)\})?'
    r' ([-+]?(?:[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?|Inf|NaN))$')
_LABEL_RE = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"')


def dev_health(sock):
    """The health answer of the daemon on sock when it has a quorum, else
    None (not listening yet, or no quorum)."""
    try:
        with Client(sock, timeout=1.0) as c:
            h = c.call("health")
            return h if h.get("ok") else None
    except OSError:
        return None


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
# Daemons with a preexec hook


class XDaemon(Daemon):
    """A Daemon with umask / RLIMIT_NOFILE set in the child, and a custom
    readiness check. ready: None = ping over NDJSON (Daemon's), or a
    callable(daemon) -> bool polled until true."""

    def __init__(self, cluster, name="x", extra=(), node_args=None,
                 umask=None, nofile=None, ready=None, env=None,
                 socket_path=None):
        super().__init__(cluster, name=name, extra=extra,
                         node_args=node_args)
        if socket_path is not None:
            i = self.argv.index("--socket")
            self.argv[i + 1] = str(socket_path)
            self.socket = Path(socket_path)
        self.umask = umask
        self.nofile = nofile
        self.ready = ready
        self.env = env

    def _preexec(self):
        rl._die_with_parent()
        if self.umask is not None:
            os.umask(self.umask)
        if self.nofile is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE,
                               (self.nofile, self.nofile))

    def start(self, wait_nodes=True, timeout=10.0 * SLOW):
        self._err = open(self.stderr_path, "wb")
        env = None
        if self.env is not None:
            env = dict(os.environ)
            env.update(self.env)
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL,
                                     stdout=self._err, stderr=self._err,
                                     preexec_fn=self._preexec, env=env)
        rl._CHILDREN.add(self.proc)
        LIVE_DAEMONS.append(self)
        try:
            if self.ready is None:
                self.wait_ready(timeout)
                if wait_nodes:
                    self.wait_all_up(timeout)
            else:
                ok, _ = poll_until(lambda: (self.proc.poll() is not None or
                                            self.ready(self)), timeout, 0.05)
                if self.proc.poll() is not None:
                    raise RuntimeError("redlockd exited %s at start:\n%s" % (
                        self.proc.returncode, self.stderr_tail()))
                if not ok:
                    raise RuntimeError("redlockd not ready:\n%s"
                                       % self.stderr_tail())
        except BaseException:
            self.kill()
            raise
        return self


def socket_listening(d):
    """XDaemon ready= check with no side effect: d.socket is listening.
    The daemon binds, chmods, then listens, so the file alone (which exists
    from bind on) is not enough: a connect in between is refused, a window
    valgrind widens. /proc/net/unix shows the listening flag
    (__SO_ACCEPTCON, 0x10000) of every socket, without connecting (which
    would log a client, or a refusal under --allow-uid)."""
    path = str(d.socket)
    try:
        with open("/proc/net/unix") as f:
            next(f, None)  # the header
            for line in f:
                cols = line.split()
                if (len(cols) >= 8 and cols[7] == path and
                        int(cols[3], 16) & 0x10000):
                    return True
    except OSError:
        pass
    return False


class _XDaemons:
    def __init__(self):
        self.daemons = []

    def start(self, cluster, name="x", extra=(), **kw):
        d = XDaemon(cluster, name=name, extra=extra, **kw)
        self.daemons.append(d)
        return d.start(wait_nodes=kw.get("ready") is None)

    def teardown(self):
        errors = []
        for d in reversed(self.daemons):
            if d.proc is None or d.exit_code is not None:
                continue
            if d.proc.poll() is not None:
                code = d.proc.returncode
                d.kill()
                d.exit_code = code
                errors.append("daemon %s exited on its own (code %r); "
                              "stderr tail:\n%s" % (d.name, code,
                                                     d.stderr_tail(60)))
                continue
            code, secs = d.stop(5.0)
            if code != 0:
                errors.append("daemon %s: SIGTERM gave exit %r%s after "
                              "%.2fs; stderr tail:\n%s"
                              % (d.name, code, rl.exit_meaning(code), secs,
                                 d.stderr_tail(60)))
        return errors


@pytest.fixture
def xdaemons(cluster):
    f = _XDaemons()
    try:
        yield f
    finally:
        cluster.resume_all()
        errors = f.teardown()
    assert not errors, "\n".join(errors)


# --------------------------------------------------------------------------
# Password-protected redis


class PwRedis:
    """redis-server --requirepass PASSWORD on DIR/<name>.sock and, with
    tcp=True, on 127.0.0.1:<free port>."""

    def __init__(self, dir_, name, password, tcp=False):
        self.dir = Path(dir_)
        self.name = name
        self.password = password
        self.path = self.dir / ("%s.sock" % name)
        self.log = self.dir / ("%s.log" % name)
        self.port = free_port() if tcp else 0
        self.proc = None

    def start(self, timeout=10.0):
        argv = [REDIS_SERVER, "--port", str(self.port),
                "--bind", "127.0.0.1",
                "--unixsocket", str(self.path), "--unixsocketperm", "700",
                "--requirepass", self.password,
                "--save", "", "--appendonly", "no", "--daemonize", "no",
                "--dir", str(self.dir), "--logfile", str(self.log)]
        self.proc = rl.popen(argv, stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        for _ in range(2000):
            if self.proc.poll() is not None:
                raise RuntimeError("redis-server %s exited" % self.name)
            try:
                if self.cmd("PING") == "PONG":
                    return self
            except (OSError, ConnectionError, RespError):
                pass
            if time.monotonic() > deadline:
                break
            time.sleep(0.02)
        raise RuntimeError("password redis %s not ready" % self.name)

    def cmd(self, *args, timeout=2.0):
        with Resp(self.path, timeout=timeout) as r:
            r.cmd("AUTH", self.password)
            return r.cmd(*args)

    def stop(self):
        if self.proc is not None:
            rl.reap(self.proc)


# --------------------------------------------------------------------------
# Small helpers


def token_on_nodes(cluster, key):
    """GET key on every node."""
    return cluster.get_all(key)


def count_eq(values, want):
    return sum(1 for v in values if v == want)


def wait_metric(addr, name, want, timeout=3.0, **labels):
    """Polls /metrics until the sample equals want; returns (value, secs)."""
    last = [None]

    def check():
        last[0] = metric(scrape(addr), name, **labels)
        return last[0] == want

    ok, secs = poll_until(check, timeout, 0.05)
    return last[0], secs


def unique_pw():
    return "pw%s" % uuid.uuid4().hex


def mkdtemp_open():
    """A temp dir anyone may traverse (for sockets reached by other uids)."""
    d = tempfile.mkdtemp(prefix="rlxt-")
    os.chmod(d, 0o755)
    return Path(d)


def stop_signal(p, sig=signal.SIGKILL):
    if p.poll() is None:
        p.send_signal(sig)
