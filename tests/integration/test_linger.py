"""Closing on an error while the peer is still sending (an oversized HTTP
body or NDJSON line): the daemon must not reset the connection under its
own answer. It shuts its side and discards input for a bounded time, so a
client that writes its whole request first still reads the error."""

import socket
import threading

from rl import assert_ok


def _send_all_then_read(path, head, body, timeout=10.0):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.connect(str(path))
    err = []

    def writer():
        try:
            s.sendall(head)
            for i in range(0, len(body), 8192):
                s.sendall(body[i:i + 8192])
        except OSError as e:  # the old behaviour: EPIPE/ECONNRESET
            err.append(e)

    t = threading.Thread(target=writer)
    t.start()
    t.join(timeout)
    data = b""
    try:
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    except OSError as e:
        err.append(e)
    s.close()
    return data, err


def test_http_413_reaches_a_client_still_sending(daemon):
    body = b"x" * (400 * 1024)
    head = (b"POST /v1/locks HTTP/1.1\r\nHost: x\r\nContent-Type: "
            b"application/json\r\nContent-Length: %d\r\n\r\n" % len(body))
    data, err = _send_all_then_read(daemon.socket, head, body)
    assert data.startswith(b"HTTP/1.1 413 "), (data[:200], err)
    assert b'"too_large"' in data, data[:300]
    assert not err, err
    with daemon.client() as c:
        assert_ok(c.call("ping"))


def test_ndjson_too_large_reaches_a_client_still_sending(daemon):
    line = b'{"op":"acquire","resource":"' + b"y" * (300 * 1024) + b'"}\n'
    data, err = _send_all_then_read(daemon.socket, b"", line)
    assert b'"too_large"' in data, (data[:300], err)
    assert not err, err
