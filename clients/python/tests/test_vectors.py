"""Shared request vectors (proto/vectors/requests.json): every NDJSON vector
that must fail is sent as a raw line on a fresh connection, and the daemon
must answer with its error code (and echo its id when the vector has one).

The first byte of a connection picks the framing, so each connection first
sends a ping line: that makes it NDJSON whatever the vector starts with
(an empty line, a BOM, a top-level array...).  After an unparseable line the
daemon answers once and closes the connection; hence one per vector.

Blank lines (the "empty request" vectors of the parser) never reach the
parser on a connection: the daemon skips them (proto/README.md), which is
checked instead.
"""

import json
import socket
import time

import pytest

from conftest import VECTORS
from redlockd import ERRORS, RedlockError, error_from_response


def _vectors():
    if not VECTORS.exists():
        return []
    out = []
    for v in json.loads(VECTORS.read_text(encoding="utf-8")):
        exp = v.get("expect", {})
        if v.get("op") is not None or exp.get("ok") is not False:
            continue  # HTTP body vectors, or vectors that succeed
        if "input" in v:
            raw = v["input"].encode("utf-8", "surrogatepass")
        elif "input_hex" in v:
            raw = bytes.fromhex(v["input_hex"])
        else:
            continue
        if b"\n" in raw:
            continue  # not one line
        out.append(pytest.param(raw, exp, id=v["name"]))
    return out


VECTOR_PARAMS = _vectors()


def _exchange(path, raw, after=b"", timeout=5.0, until_eof=False):
    """Send a warm-up ping, raw and after (each a line); return the decoded
    answers and whether the daemon closed the connection (EOF): read until
    the answers are in, or (until_eof) until the daemon closes."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(path)
        s.sendall(b'{"op":"ping","id":"warmup"}\n' + raw + b"\n" + after)
        want = 2 + after.count(b"\n")
        buf = b""
        lines = []
        eof = False
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                chunk = s.recv(65536)
            except socket.timeout:
                break
            if not chunk:
                eof = True
                break
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                lines.append(json.loads(line))
            if len(lines) >= want and not until_eof:
                break
        return lines, eof


PING_AFTER = b'{"op":"ping","id":"after"}\n'


@pytest.mark.skipif(not VECTOR_PARAMS, reason="no proto/vectors/requests.json")
@pytest.mark.parametrize("raw,expect", VECTOR_PARAMS)
def test_error_vector(sock, raw, expect):
    warm = {"id": "warmup", "ok": True}
    if not raw.strip(b" \t\r"):
        lines, _ = _exchange(sock, raw, PING_AFTER)
        assert lines == [warm, {"id": "after", "ok": True}], lines
        return
    not_json = expect.get("not_json") is True
    lines, eof = _exchange(sock, raw, b"" if not_json else PING_AFTER,
                           until_eof=not_json)
    assert len(lines) >= 2, "no answer to %r: %r" % (raw[:80], lines)
    assert lines[0] == warm
    resp = lines[1]
    assert resp.get("ok") is False, resp
    err = resp["error"]
    assert err["code"] == expect["code"], resp
    mapped = error_from_response(resp)
    assert isinstance(mapped, ERRORS[expect["code"]])
    assert isinstance(mapped, RedlockError)
    assert mapped.message == err["message"]
    if "message" in expect:
        assert err["message"] == expect["message"], resp
    if "message_prefix" in expect:
        assert err["message"].startswith(expect["message_prefix"]), resp
    if expect.get("field"):
        assert expect["field"] in err["message"], resp
    if expect.get("id") is not None:
        assert "id" in resp and resp["id"] == json.loads(expect["id"]), resp
    else:
        assert "id" not in resp, resp
    if not_json:
        # Answered once, then the connection is closed.
        assert eof and len(lines) == 2, (lines, eof)
    else:
        # The connection goes on.
        assert lines[2:] == [{"id": "after", "ok": True}], lines


def test_daemon_survives_vectors(client):
    assert client.ping()
