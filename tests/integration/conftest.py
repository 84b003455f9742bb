"""conftest.py: fixtures for the redlockd integration suite.

cluster / daemon           function scope: 5 fresh redis-servers and a
                           daemon; use these when a test pauses, kills or
                           restarts nodes, or stops the daemon.
cluster_mod / daemon_mod   module scope, for read-only tests; such tests
                           must use distinct random resource names (rl.rname).
daemon_factory             function scope: start(cluster, name, extra flags)
                           for extra daemons (second daemon on the same
                           nodes, --max-connections 2, ...).

Teardown always resumes paused nodes, stops every daemon with SIGTERM
(asserting exit 0 within 5 s), kills the redis-servers and removes the temp
dir. When a test fails, the stderr of every running daemon is attached to the
report.
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
# rl, the harness every Python suite shares.
sys.path.insert(0, os.path.join(HERE, "..", "harness"))

from rl import (LIVE_DAEMONS, Cluster, Daemon, exit_meaning,  # noqa: E402
                pytest)

STOP_BOUND_S = 5.0


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.when in ("setup", "call") and rep.failed:
        for d in list(LIVE_DAEMONS):
            rep.sections.append((
                "redlockd %s stderr (last lines, %s)" % (d.name,
                                                          d.stderr_path),
                d.stderr_tail(150)))


def _stop_daemon(d, errors):
    code, secs = d.stop(STOP_BOUND_S)
    if code != 0:
        errors.append("daemon %s: SIGTERM gave exit %r%s after %.2fs "
                      "(expected 0 within %.0fs); stderr tail:\n%s"
                      % (d.name, code, exit_meaning(code), secs,
                         STOP_BOUND_S, d.stderr_tail(60)))


class _Factory:
    def __init__(self):
        self.daemons = []

    def start(self, cluster, name="d2", extra=(), wait_nodes=True,
              node_args=None):
        d = Daemon(cluster, name=name, extra=extra, node_args=node_args)
        self.daemons.append(d)
        return d.start(wait_nodes=wait_nodes)

    def teardown(self, errors):
        for d in reversed(self.daemons):
            if d.proc is not None and d.exit_code is None:
                _stop_daemon(d, errors)


def _cluster():
    return Cluster(5).start()


@pytest.fixture
def cluster():
    c = _cluster()
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture
def daemon_factory(cluster):
    f = _Factory()
    errors = []
    try:
        yield f
    finally:
        cluster.resume_all()
        f.teardown(errors)
    assert not errors, "\n".join(errors)


@pytest.fixture
def daemon(cluster, daemon_factory):
    return daemon_factory.start(cluster, name="d")


@pytest.fixture(scope="module")
def cluster_mod():
    c = _cluster()
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="module")
def daemon_mod(cluster_mod):
    f = _Factory()
    errors = []
    try:
        yield f.start(cluster_mod, name="dm")
    finally:
        cluster_mod.resume_all()
        f.teardown(errors)
    assert not errors, "\n".join(errors)
