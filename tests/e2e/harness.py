"""harness.py: what the end-to-end Telegram test adds to tests/harness/rl.py.

Standard library only. The nodes and daemons are rl's (rl.Cluster,
rl.Daemon: five redis-servers on unix sockets in one temp dir, no TCP, and
redlockd daemons on them, each on its own unix socket); this module adds:
  - Procs: the bot processes (Node grammY instances, a Python instance),
    each logging to DIR/<name>.log; stop_all() ends every one of them:
    SIGTERM, then SIGKILL after a bound;
  - Redis / Daemon: rl's nodes and daemons, or a topology started elsewhere
    (the container suite's compose project) named by the environment.

Every child is started by rl.popen (PR_SET_PDEATHSIG: it gets SIGKILL if the
test process dies; killed at exit in any case). Every wait here is bounded.
"""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "harness"))

import rl  # noqa: E402  (the harness every Python suite shares)

REPO = rl.REPO
NODE = os.environ.get("NODE", "node")
poll_until = rl.poll_until
lock_key = rl.lock_key
# Run against a topology started elsewhere (the container suite's compose
# project) instead of starting redis-servers and daemons here:
# E2E_REDIS_SOCKETS, the five nodes' unix sockets, comma separated;
# E2E_REDLOCKD_SOCKETS, "A=PATH,B=PATH", the two daemons' sockets.
EXTERNAL_REDIS = [p for p in os.environ.get("E2E_REDIS_SOCKETS",
                                            "").split(",") if p]
EXTERNAL_DAEMONS = dict(kv.split("=", 1) for kv in os.environ.get(
    "E2E_REDLOCKD_SOCKETS", "").split(",") if "=" in kv)


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
    """Registry of the bots; stop_all() ends every one of them."""

    def __init__(self, workdir):
        self.dir = Path(workdir)
        self.procs = []

    def spawn(self, name, argv, env=None, cwd=None):
        log_path = self.dir / ("%s.log" % name)
        log = open(log_path, "ab")
        try:
            p = rl.popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                         stderr=subprocess.STDOUT, env=env, cwd=cwd)
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


class Redis:
    """Five redis-servers (rl.Cluster) on DIR/nK.sock, or the external ones
    of E2E_REDIS_SOCKETS; get_all() reads over one kept connection each."""

    def __init__(self, workdir, n=5):
        self.dir = Path(workdir)
        self.cluster = None if EXTERNAL_REDIS else rl.Cluster(n, self.dir)
        self.paths = ([Path(p) for p in EXTERNAL_REDIS] if EXTERNAL_REDIS
                      else [nd.path for nd in self.cluster.nodes])
        self.conns = []

    def start(self, timeout=10.0):
        if self.cluster is not None:
            self.cluster.start()
        for path in self.paths:
            ok, _ = poll_until(lambda path=path: rl.resp_ping(path), timeout,
                               0.01)
            if not ok:
                raise RuntimeError("redis-server on %s did not start" % path)
        self.conns = [rl.Resp(p) for p in self.paths]
        return self

    def node_args(self):
        out = []
        for p in self.paths:
            out += ["--node", "unix://%s" % p]
        return out

    def get_all(self, key):
        """GET key on every node, as text (None where a node does not
        answer)."""
        out = []
        for c in self.conns:
            try:
                v = c.cmd("GET", key)
                out.append(v.decode() if isinstance(v, bytes) else v)
            except (OSError, ConnectionError, rl.RespError):
                out.append(None)
        return out

    def close(self):
        for c in self.conns:
            c.close()
        self.conns = []
        if self.cluster is not None:
            self.cluster.stop()


class Daemon(rl.Daemon):
    """A redlockd on the Redis nodes, serving on DIR/<name>.sock, with the
    daemon's default flags; or the external one of E2E_REDLOCKD_SOCKETS
    (proc stays None: its owner stops it)."""

    def __init__(self, redis, name):
        super().__init__(redis, name=name, flags=[])
        self.baseline = {}

    def metrics(self):
        """rl.scrape() of /metrics, less what an external daemon had counted
        before."""
        now = rl.scrape(self.socket)
        return {k: v - self.baseline.get(k, 0) for k, v in now.items()}

    def start(self, timeout=10.0):
        if self.name not in EXTERNAL_DAEMONS:
            return super().start(timeout=timeout)
        self.socket = Path(EXTERNAL_DAEMONS[self.name])

        def healthy():
            try:
                return self.health(1.0).get("ok")
            except (OSError, rl.Closed, AssertionError, ValueError):
                return False
        ok, _ = poll_until(healthy, timeout, 0.1)
        if not ok:
            raise RuntimeError("external redlockd %s at %s is not healthy"
                               % (self.name, self.socket))
        self.baseline = rl.scrape(self.socket)
        return self


def make_workdir():
    # Short path: unix socket paths are limited to 107 bytes.
    return Path(tempfile.mkdtemp(prefix="rl-e2e-", dir="/tmp"))


def remove_workdir(path, keep=False):
    if not keep:
        shutil.rmtree(path, ignore_errors=True)
