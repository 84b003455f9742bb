"""A client that pipelines without reading cannot grow
the daemon's memory, and other clients keep being served."""

import socket
import time

from rl import SLOW, Client, assert_ok, rname

LINES = 200000
RSS_BOUND_KB = 64 * 1024


def test_writer_that_never_reads(cluster, daemon):
    pad = "x" * 200
    # ping and health alternate: an unbounded daemon would queue well over
    # 100 MB of answers for these 200k lines.
    lines = [('{"op":"ping","id":"%s%07d"}\n' % (pad, i)).encode()
             if i % 2 else
             ('{"op":"health","id":"%s%07d"}\n' % (pad, i)).encode()
             for i in range(LINES)]
    rss0 = daemon.rss_kb()
    other = daemon.client(timeout=5.0)
    hog = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    hog.connect(str(daemon.socket))
    hog.setblocking(False)
    sent_lines = 0
    sent_bytes = 0
    pending = b""
    lat = []
    rss_max = rss0
    t0 = time.monotonic()
    last_progress = t0
    next_probe = t0
    stalled = False
    try:
        for _ in range(10000000):
            now = time.monotonic()
            if now - t0 > 30.0 * SLOW:
                break
            if now >= next_probe:
                p0 = time.monotonic()
                r = other.call("ping", timeout=5.0 * SLOW)
                lat.append(time.monotonic() - p0)
                assert r.get("ok") is True, r
                rss_max = max(rss_max, daemon.rss_kb())
                next_probe = time.monotonic() + 0.05
            if not pending:
                if sent_lines >= LINES:
                    break
                pending = b"".join(lines[sent_lines:sent_lines + 500])
                chunk_lines = min(500, LINES - sent_lines)
            try:
                n = hog.send(pending)
            except BlockingIOError:
                n = 0
            if n:
                sent_bytes += n
                pending = pending[n:]
                last_progress = time.monotonic()
                if not pending:
                    sent_lines += chunk_lines
            else:
                if time.monotonic() - last_progress > 2.0:
                    stalled = True
                    break
                time.sleep(0.002)
        # The hog stays connected and unread for another second.
        for _ in range(20):
            p0 = time.monotonic()
            r = other.call("ping", timeout=5.0 * SLOW)
            lat.append(time.monotonic() - p0)
            assert r.get("ok") is True, r
            rss_max = max(rss_max, daemon.rss_kb())
            time.sleep(0.05)
        # A lock round trip works too while the hog is stuck.
        res = rname("bp")
        r = other.call("acquire", resource=res, timeout=5.0 * SLOW)
        assert_ok(r, "acquire during back-pressure")
        assert_ok(other.call("release", lock=r["lock"]))
    finally:
        hog.close()
    grown = rss_max - rss0
    print("hog: %d lines (%d bytes) accepted of %d, %s; daemon RSS %d kB ->"
          " max %d kB (+%d kB); other client's ping latency max %.1f ms, "
          "median %.1f ms over %d probes" % (
              sent_lines, sent_bytes, LINES,
              "stalled (back-pressure)" if stalled else "not stalled",
              rss0, rss_max, grown, max(lat) * 1000,
              sorted(lat)[len(lat) // 2] * 1000, len(lat)))
    assert grown < RSS_BOUND_KB, (
        "daemon RSS grew by %d kB (bound %d kB) for a client that never "
        "reads" % (grown, RSS_BOUND_KB))
    assert max(lat) < 1.0 * SLOW, (
        "other client waited %.3fs for a ping" % max(lat))

    # After the hog closed, the daemon is fine and memory comes back down
    # (or at least does not keep growing).
    time.sleep(0.5)
    assert daemon.alive()
    with Client(daemon.socket) as c:
        assert c.call("ping")["ok"] is True
    other.close()
