"""Start-up errors exit 2 with exactly one line on
stderr naming the problem; --help and --version exit 0."""

import os
import re
import shutil
import tempfile

from rl import BIN, Client, Daemon, base_daemon_flags, pytest, run_bin


def _one_line(p):
    err = p.stderr.decode(errors="replace")
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].strip(), (
        "expected exactly one line on stderr, got %d: %r" % (len(lines),
                                                              err[:2000]))
    return lines[0]


NODE = "unix:///tmp/rl-does-not-matter/n1.sock"

BAD = [
    (["--bogus-flag"], "--bogus-flag"),
    (["--node", NODE, "--frobnicate", "1"], "--frobnicate"),
    (["--node", NODE, "--node-timeout-ms", "abc"], "--node-timeout-ms"),
    (["--node", NODE, "--log-level", "loud"], "--log-level"),
    (["--node", NODE, "--max-line-bytes", "-5"], "--max-line-bytes"),
    (["--node"], "--node"),
    (["--node", "ftp://host:1"], "ftp://host:1"),
    (["--node", "redis://"], "redis://"),
    (["--node", "redis://host:99999"], "redis://host:99999"),
    # Not repeated whole: "notaport" has the shape of "user:password".
    (["--node", "redis://host:notaport"], "redis://host:***"),
    (["--node", "unix://"], "unix://"),
    (["--node", "garbage"], "garbage"),
]


@pytest.mark.parametrize("args,named", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_flag_or_uri_exits_2(args, named, tmp_path):
    p = run_bin(args + ["--socket", str(tmp_path / "s.sock")])
    line = _one_line(p)
    assert p.returncode == 2, (p.returncode, line)
    assert named in line, "stderr line does not name %r: %r" % (named, line)
    assert not (tmp_path / "s.sock").exists()


def test_bad_uri_does_not_show_password(tmp_path):
    p = run_bin(["--node", "redis://:s3cretpw@host:notaport",
                 "--socket", str(tmp_path / "s.sock")])
    line = _one_line(p)
    assert p.returncode == 2, (p.returncode, line)
    assert "s3cretpw" not in line, "password shown: %r" % line


def test_bad_uri_without_at_does_not_show_password(tmp_path):
    for uri in ("redis://:s3cretpw", "redis://user:s3cretpw"):
        p = run_bin(["--node", uri, "--socket", str(tmp_path / "s.sock")])
        line = _one_line(p)
        assert p.returncode == 2, (p.returncode, line)
        assert "s3cretpw" not in line, "password shown: %r" % line


def test_duplicate_node_refused(tmp_path):
    p = run_bin(["--node", "unix:///tmp/r1.sock", "--node",
                 "unix:///tmp//r1.sock", "--node", "unix:///tmp/r2.sock",
                 "--socket", str(tmp_path / "s.sock")])
    line = _one_line(p)
    assert p.returncode == 2, (p.returncode, line)
    assert "node 2" in line and "node 1" in line, line


def test_bad_uri_in_env(tmp_path):
    p = run_bin(["--socket", str(tmp_path / "s.sock")],
                env={"REDLOCKD_NODES": "redis://host:1,bogus://x"})
    line = _one_line(p)
    assert p.returncode == 2, (p.returncode, line)
    assert "bogus://x" in line, line


def test_unreadable_config_exits_2(tmp_path):
    missing = str(tmp_path / "nope" / "missing.json")
    p = run_bin(["--config", missing, "--node", NODE])
    line = _one_line(p)
    assert p.returncode == 2, (p.returncode, line)
    assert missing in line, line
    # A directory is not a readable config either.
    p = run_bin(["--config", str(tmp_path), "--node", NODE])
    line = _one_line(p)
    assert p.returncode == 2, (p.returncode, line)
    assert str(tmp_path) in line, line


def test_config_not_json_exits_2(tmp_path):
    cfg = tmp_path / "bad.json"
    cfg.write_text("{ this is not json")
    p = run_bin(["--config", str(cfg), "--node", NODE,
                 "--socket", str(tmp_path / "s.sock")])
    line = _one_line(p)
    assert p.returncode == 2, (p.returncode, line)
    assert str(cfg) in line or "config" in line, line


def test_no_nodes_exits_2(tmp_path):
    p = run_bin(["--socket", str(tmp_path / "s.sock")])
    line = _one_line(p)
    assert p.returncode == 2, (p.returncode, line)
    assert "node" in line.lower(), line


def test_help_exits_0():
    p = run_bin(["--help"])
    assert p.returncode == 0, (p.returncode, p.stderr)
    out = p.stdout.decode(errors="replace")
    assert "--node" in out and "--socket" in out, out[:2000]
    # --metrics-listen serves health too (README.md's options table)
    assert "GET /metrics and GET /v1/health" in " ".join(out.split()), out
    # SIGHUP stops the daemon like SIGTERM (README.md); an operator used to
    # a reload on SIGHUP must learn that from --help too
    assert re.search(r"Exit status: 0 after a clean shutdown \([^)]*SIGHUP",
                     " ".join(out.split())), out[-600:]
    assert p.stderr == b"", p.stderr


def test_version_exits_0():
    p = run_bin(["--version"])
    assert p.returncode == 0, (p.returncode, p.stderr)
    out = p.stdout.decode(errors="replace")
    assert re.search(r"\d+\.\d+\.\d+", out), out
    assert p.stderr == b"", p.stderr


def test_env_fallbacks(cluster):
    """REDLOCKD_NODES and REDLOCKD_SOCKET stand in for the flags."""
    d = Daemon(cluster, name="envd", node_args=[])
    d.argv = [str(BIN)] + base_daemon_flags()
    env_backup = dict(os.environ)
    os.environ["REDLOCKD_NODES"] = ",".join(cluster.uris())
    os.environ["REDLOCKD_SOCKET"] = str(d.socket)
    try:
        d.start()
    finally:
        os.environ.clear()
        os.environ.update(env_backup)
    try:
        with Client(d.socket) as c:
            h = c.call("health")
            assert h.get("ok") is True and len(h["nodes"]) == 5, h
    finally:
        code, secs = d.stop()
    assert code == 0, (code, d.stderr_tail())


def test_live_socket_not_stolen(cluster, daemon):
    """A second daemon on a socket path that has a live listener refuses to
    start (exit 2 is not promised here, only non-zero) and the first one
    keeps serving."""
    p = run_bin(cluster.node_args() + ["--socket", str(daemon.socket)],
                timeout=10.0)
    assert p.returncode != 0, "second daemon started on a live socket"
    with daemon.client() as c:
        assert c.call("ping")["ok"] is True


def test_tempdir_socket_path_too_long():
    """A socket path longer than sun_path is refused, not truncated."""
    d = tempfile.mkdtemp(prefix="rlit-long-")
    try:
        path = os.path.join(d, "s" * 120 + ".sock")
        p = run_bin(["--node", NODE, "--socket", path])
        assert p.returncode != 0
        assert len(p.stderr.decode(errors="replace").splitlines()) >= 1
    finally:
        shutil.rmtree(d, ignore_errors=True)
