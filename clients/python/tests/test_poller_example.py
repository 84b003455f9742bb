"""examples/getupdates_poller.py, run twice against a fake Bot API that
behaves like Telegram's getUpdates: one long poll at a time (a second one
gets 409 Conflict), updates kept until a poll's offset confirms them.  One
instance polls; each update is handled once; when the leader is killed the
other takes over and handles the rest."""

import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse

import pytest

EXAMPLE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))), "examples", "getupdates_poller.py")


class FakeBotAPI:
    """getUpdates only, on 127.0.0.1; long polls last at most 0.3 s."""

    def __init__(self) -> None:
        self.mu = threading.Condition()
        self.updates = []          # pending, ascending update_id
        self.next_id = 1000
        self.polling = 0           # getUpdates open now
        self.conflicts = 0
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(
                    int(self.headers.get("content-length", 0))) or b"{}")
                if not urlparse(self.path).path.endswith("/getUpdates"):
                    self._send(404, {"ok": False})
                    return
                code, obj = api.get_updates(body.get("offset"))
                self._send(code, obj)

            def _send(self, code, obj):
                data = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever,
                                       daemon=True)
        self.thread.start()
        self.root = "http://127.0.0.1:%d" % self.server.server_address[1]

    def get_updates(self, offset):
        with self.mu:
            if self.polling:
                self.conflicts += 1
                return 409, {"ok": False, "error_code": 409,
                             "description": "Conflict: terminated by other "
                             "getUpdates request; make sure that only one "
                             "bot instance is running"}
            self.polling += 1
            try:
                if offset is not None:   # confirms everything below it
                    self.updates = [u for u in self.updates
                                    if u["update_id"] >= offset]
                deadline = time.monotonic() + 0.3
                while not self.updates and time.monotonic() < deadline:
                    self.mu.wait(deadline - time.monotonic())
                return 200, {"ok": True, "result": list(self.updates)}
            finally:
                self.polling -= 1

    def push(self, n):
        with self.mu:
            ids = []
            for _ in range(n):
                self.updates.append({"update_id": self.next_id,
                                     "message": {"text": "hi"}})
                ids.append(self.next_id)
                self.next_id += 1
            self.mu.notify_all()
            return ids

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def _handled(path):
    with open(path, errors="replace") as f:
        return [int(ln.split("update ", 1)[1].split()[0])
                for ln in f if "INFO:poller:update " in ln]


def test_two_pollers_one_leader_each_update_once(daemon, sock, tmp_path):
    api = FakeBotAPI()
    env = dict(os.environ, REDLOCKD_SOCKET=sock,
               BOT_TOKEN="%d:test" % (time.time_ns() % 10**9),
               TELEGRAM_API_ROOT=api.root, PYTHONUNBUFFERED="1",
               PYTHONPATH=os.path.dirname(os.path.dirname(EXAMPLE)))
    logs = [str(tmp_path / ("p%d.log" % k)) for k in range(2)]
    procs = []
    try:
        for path in logs:
            with open(path, "w") as out:
                procs.append(subprocess.Popen(
                    [sys.executable, EXAMPLE], env=env, stdout=out,
                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL))

        def wait_handled(ids, timeout=30):
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                seen = _handled(logs[0]) + _handled(logs[1])
                if set(ids) <= set(seen):
                    return seen
                time.sleep(0.05)
            pytest.fail("not handled: %s" % (set(ids) - set(seen)))

        first = api.push(5)
        seen = wait_handled(first)
        leading = [k for k in range(2) if _handled(logs[k])]
        assert len(leading) == 1, "both instances polled"
        procs[leading[0]].kill()
        procs[leading[0]].wait(5)
        second = api.push(5)
        seen = wait_handled(first + second)
        other = 1 - leading[0]
        assert set(second) <= set(_handled(logs[other]))
        assert sorted(seen) == sorted(first + second), "an update twice"
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait(5)
        api.close()
