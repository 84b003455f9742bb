"""Fixtures: a real redlockd (``--dev``) and, for node-failure tests, a
daemon on five redis-servers of our own.

Everything runs on unix sockets in fresh temp dirs under /tmp.  Daemons are
stopped with SIGTERM in teardown (SIGKILL after a bound), redis-servers are
resumed (SIGCONT) and killed, and the dirs removed, also when a test fails.

Environment: REDLOCKD_BIN (daemon binary; default <repo>/build/sidecar/
redlockd), REDIS_SERVER (default redis-server).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import List, Optional

import pytest

HERE = Path(__file__).resolve().parent
PKG_ROOT = HERE.parent                      # clients/python
REPO = HERE.parents[2]
sys.path.insert(0, str(PKG_ROOT))

BIN = os.environ.get("REDLOCKD_BIN",
                     str(REPO / "build" / "sidecar" / "redlockd"))
REDIS_SERVER = os.environ.get("REDIS_SERVER", "redis-server")
VECTORS = REPO / "proto" / "vectors" / "requests.json"

STOP_BOUND_S = 10.0


def rname(tag: str = "r") -> str:
    """A resource name no other test uses."""
    return "pytest:%s:%s" % (tag, uuid.uuid4().hex[:12])


def ndjson_ping(path: str, timeout: float = 0.5) -> bool:
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout)
            s.connect(path)
            s.sendall(b'{"op":"ping","id":0}\n')
            data = b""
            deadline = time.monotonic() + timeout
            while b"\n" not in data and time.monotonic() < deadline:
                chunk = s.recv(4096)
                if not chunk:
                    return False
                data += chunk
            return json.loads(data.split(b"\n", 1)[0]).get("ok") is True
    except (OSError, ValueError):
        return False


class Daemon:
    """One redlockd child: --dev, or --node URIs of our own redis-servers."""

    def __init__(self, dir_: str, name: str = "d",
                 nodes: Optional[List[str]] = None, extra: tuple = ()) -> None:
        if not os.access(BIN, os.X_OK):
            pytest.skip("redlockd binary not found at %s (build it, or set "
                        "REDLOCKD_BIN)" % BIN)
        self.dir = dir_
        self.name = name
        self.path = os.path.join(dir_, name + ".sock")
        self.nodes = nodes
        self.extra = tuple(extra)
        self.proc: Optional[subprocess.Popen] = None
        self.stderr_path = os.path.join(dir_, name + ".stderr")
        self.exit_code: Optional[int] = None

    def argv(self) -> List[str]:
        argv = [BIN]
        if self.nodes is None:
            argv.append("--dev")
        else:
            for uri in self.nodes:
                argv += ["--node", uri]
        return argv + ["--socket", self.path, "--log-level", "debug",
                       *self.extra]

    def start(self, timeout: float = 15.0) -> "Daemon":
        err = open(self.stderr_path, "ab")
        self.exit_code = None
        self.proc = subprocess.Popen(self.argv(), stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=err,
                                     cwd=self.dir)
        err.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("redlockd exited with %s at start:\n%s"
                                   % (self.proc.returncode, self.tail()))
            if os.path.exists(self.path) and ndjson_ping(self.path):
                return self
            time.sleep(0.05)
        self.stop()
        raise RuntimeError("redlockd did not answer ping within %.0fs:\n%s"
                           % (timeout, self.tail()))

    def signal(self, sig: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)

    def wait(self, timeout: float) -> Optional[int]:
        if self.proc is None:
            return None
        try:
            self.exit_code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
        return self.exit_code

    def stop(self) -> Optional[int]:
        """SIGTERM; SIGKILL if it has not exited within STOP_BOUND_S."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.exit_code = self.proc.wait(STOP_BOUND_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
                self.exit_code = None
                return None
        self.exit_code = self.proc.returncode
        return self.exit_code

    def tail(self, n: int = 40) -> str:
        try:
            with open(self.stderr_path, "rb") as f:
                lines = f.read().decode("utf-8", "replace").splitlines()
            return "\n".join(lines[-n:])
        except OSError:
            return ""


class Cluster:
    """Five redis-servers on unix sockets in one temp dir."""

    def __init__(self, dir_: str, n: int = 5, tag: str = "n") -> None:
        self.dir = dir_
        self.tag = tag
        self.socks = [os.path.join(dir_, "%s%d.sock" % (tag, k))
                      for k in range(n)]
        self.procs: List[subprocess.Popen] = []

    @property
    def uris(self) -> List[str]:
        return ["unix://" + s for s in self.socks]

    def start(self, timeout: float = 10.0) -> "Cluster":
        if shutil.which(REDIS_SERVER) is None:
            pytest.skip("redis-server not found")
        for k, sock in enumerate(self.socks):
            log = open(os.path.join(self.dir, "%s%d.log" % (self.tag, k)),
                       "ab")
            self.procs.append(subprocess.Popen(
                [REDIS_SERVER, "--port", "0", "--unixsocket", sock,
                 "--save", "", "--appendonly", "no", "--daemonize", "no"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                cwd=self.dir))
            log.close()
        deadline = time.monotonic() + timeout
        for sock in self.socks:
            while not self._resp_ping(sock):
                if time.monotonic() > deadline:
                    raise RuntimeError("redis-server on %s did not start"
                                       % sock)
                time.sleep(0.05)
        return self

    @staticmethod
    def _resp_ping(path: str) -> bool:
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.settimeout(0.5)
                s.connect(path)
                s.sendall(b"*1\r\n$4\r\nPING\r\n")
                return s.recv(64).startswith(b"+PONG")
        except OSError:
            return False

    def pause(self, *ks: int) -> None:
        for k in ks:
            self.procs[k].send_signal(signal.SIGSTOP)

    def kill(self, *ks: int) -> None:
        for k in ks:
            self.procs[k].kill()
            self.procs[k].wait(5)

    def resume_all(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        self.resume_all()
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)


def _tmpdir(tag: str) -> str:
    # Short paths: a unix socket path must fit in 108 bytes.
    return tempfile.mkdtemp(prefix="rlpy-%s-" % tag, dir="/tmp")


@pytest.fixture(scope="session")
def daemon():
    """A --dev daemon shared by the whole session (use rname())."""
    d = _tmpdir("s")
    dm = Daemon(d, "d")
    try:
        dm.start()
        yield dm
    finally:
        code = dm.stop()
        shutil.rmtree(d, ignore_errors=True)
    assert code == 0, "redlockd exit %r after SIGTERM" % (code,)


@pytest.fixture
def sock(daemon) -> str:
    """The shared daemon's socket.  On a shared machine, something outside
    this suite may signal our daemon (a broad pkill); when it stopped on a
    signal, it is started again, with a warning.  Any other exit fails."""
    if daemon.proc is not None and daemon.proc.poll() is not None:
        tail = daemon.tail()
        if daemon.proc.returncode == 0 and ("SIGTERM: stopping" in tail or
                                            "SIGINT: stopping" in tail):
            import warnings
            warnings.warn("the shared redlockd was stopped by a signal from "
                          "outside the tests; restarting it:\n" + tail)
            daemon.start()
        else:
            pytest.fail("the shared redlockd exited with %s:\n%s"
                        % (daemon.proc.returncode, tail))
    return daemon.path


@pytest.fixture
def client(sock):
    from redlockd import RedlockClient
    c = RedlockClient(sock, timeout=10.0)
    try:
        yield c
    finally:
        c.close()


class Spawner:
    """Start daemons (and node clusters) owned by one test."""

    def __init__(self) -> None:
        self.dir = _tmpdir("f")
        self.daemons: List[Daemon] = []
        self.clusters: List[Cluster] = []
        self.n = 0

    def cluster(self) -> Cluster:
        c = Cluster(self.dir, tag="c%dn" % len(self.clusters))
        self.clusters.append(c)
        return c.start()

    def daemon(self, nodes: Optional[List[str]] = None, extra: tuple = (),
               name: Optional[str] = None) -> Daemon:
        self.n += 1
        d = Daemon(self.dir, name or "d%d" % self.n, nodes, extra)
        self.daemons.append(d)
        return d.start()

    def close(self) -> List[str]:
        errors = []
        for c in self.clusters:
            c.resume_all()
        for d in reversed(self.daemons):
            if d.proc is not None and d.proc.poll() is None:
                code = d.stop()
                if code != 0:
                    errors.append("daemon %s: exit %r after SIGTERM\n%s"
                                  % (d.name, code, d.tail()))
        for c in self.clusters:
            c.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
        return errors


@pytest.fixture
def spawn():
    s = Spawner()
    try:
        yield s
    finally:
        errors = s.close()
    assert not errors, "\n".join(errors)


@pytest.fixture
def nodes(spawn):
    """(cluster, daemon): five redis-servers of this test's own and a
    daemon on them, for tests that pause nodes."""
    cluster = spawn.cluster()
    return cluster, spawn.daemon(nodes=cluster.uris)


async def sleep_until_lost(cluster, ks, on_cancel):
    """Pauses nodes ks (three of five: the held lock loses its quorum and
    is lost) and sleeps until the loss cancels this task; on_cancel() runs
    first, then the cancellation goes on."""
    cluster.pause(*ks)
    try:
        await asyncio.sleep(30)
    except asyncio.CancelledError:
        on_cancel()
        raise
