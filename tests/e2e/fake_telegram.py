"""fake_telegram.py: a fake Telegram Bot API on 127.0.0.1 that delivers a
fixed set of updates at least once, and many of them several times, to
several bot instances at once.

Standard library only (http.server, threaded). Served paths:

    /i/<instance>/bot<token>/<method>     (grammY: apiRoot = .../i/<instance>)
    /bot<token>/<method>                  (instance "-")

The /i/<instance> prefix only tells the fake which instance is calling, so
that it can record who sent what; every instance uses the same bot token, as
the instances of one bot do. Parameters come from the query string and a
JSON or x-www-form-urlencoded body.

Methods:
  getMe            the bot user.
  setWebhook       registers the caller's webhook (url must be
                   http://127.0.0.1:PORT/...; max_connections, secret_token).
                   Unlike Telegram, which keeps one URL per bot, the fake keeps
                   one per instance and delivers every update to each of them:
                   this is how it makes duplicates.
  deleteWebhook    drops the caller's webhook.
  getUpdates       offset / limit / timeout, Telegram style: updates with
                   update_id < offset are confirmed (dropped) and the answer
                   holds pending updates with update_id >= offset, up to limit,
                   waiting up to timeout seconds (capped at max_long_poll) for
                   one to arrive. One queue for all pollers, so pollers that
                   poll at the same time get overlapping batches. For a random
                   subset of requests the fake "loses" the confirmation: it
                   ignores the offset altogether and answers from the oldest
                   unconfirmed update, so a poller gets updates again.
  sendMessage      recorded (instance, chat_id, text); answers a Message.
  sendChatAction   recorded; answers true.
Anything else: 404 as Telegram answers an unknown method. Wrong token: 401.

Webhook delivery: each update is POSTed to each registered webhook instance
(after a small random delay, so that deliveries overlap), at most
max_connections requests in flight per instance. A delivery that answers
non-200, times out or has its connection reset is retried after a back-off;
an instance that refuses connections is marked dead and the delivery fails
over to the next live webhook instance. A random subset of deliveries that
got 200 is delivered again (Telegram does so after network errors).
`exclusive` maps an update_id to the one webhook instance that first gets it
(no poller sees it): the test uses it to put one update into the hands of
the instance it is going to kill.

Every HTTP request is logged (self.requests), every delivery is recorded
with its time interval (self.deliveries): a webhook delivery lasts from the
POST to its answer, a getUpdates delivery from the answer to that poller's
next getUpdates (grammY's and the Python bot's pollers handle a batch before
asking for the next one).
"""

import http.client
import json
import random
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

REACHED = "reached"  # the delivery got to the bot (whatever it answered)


class FakeTelegram:
    def __init__(self, token, updates, seed=0, *, bot_user=None,
                 release_interval=0.1, fanout_jitter=0.25,
                 webhook_timeout=8.0, retry_backoff=1.0, max_attempts=6,
                 redeliver_p=0.35, ignore_confirm_p=0.25,
                 max_ignored_confirms=20, max_long_poll=1.0,
                 exclusive=None):
        self.token = token
        self.updates = list(updates)
        self.by_id = {u["update_id"]: u for u in self.updates}
        self.rng = random.Random(seed)
        self.bot_user = bot_user or {"id": 4242, "is_bot": True,
                                     "first_name": "E2E",
                                     "username": "redlockd_e2e_bot"}
        self.release_interval = release_interval
        self.fanout_jitter = fanout_jitter
        self.webhook_timeout = webhook_timeout
        self.retry_backoff = retry_backoff
        self.max_attempts = max_attempts
        self.redeliver_p = redeliver_p
        self.ignore_confirm_p = ignore_confirm_p
        self.max_ignored_confirms = max_ignored_confirms
        self.max_long_poll = max_long_poll
        self.exclusive = dict(exclusive or {})

        self.cond = threading.Condition()
        self.requests = []       # per-request log
        self.sent = []           # sendMessage calls
        self.chat_actions = []   # sendChatAction calls
        self.deliveries = []     # one dict per delivery attempt
        self.webhooks = {}       # instance -> {url, max_connections, sem, ..}
        self.dead = set()        # webhook instances that refused connections
        self.pollers = set()     # instances that called getUpdates
        self.pending = {}        # update_id -> update, poll channel
        self.open_polls = {}     # instance -> deliveries of its last batch
        self.ignored_confirms = 0
        self.gave_up = []        # (update_id, instance) given up deliveries
        self.failovers = []      # (update_id, from, to)
        self.message_id = 0
        self.stopping = False
        self.released = 0
        self._jobs = []
        self._jobs_active = 0
        self._release_thread = None
        self.chat_action_event = threading.Event()
        self.httpd = None
        self._serve_thread = None

    # -- server --------------------------------------------------------------

    def start(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, fmt, *args):
                pass

            def do_GET(self):
                fake._serve(self)

            def do_POST(self):
                fake._serve(self)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self._serve_thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.1},
            name="fake-telegram", daemon=True)
        self._serve_thread.start()
        return self

    @property
    def port(self):
        return self.httpd.server_address[1]

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.port

    def api_root(self, instance):
        return "%s/i/%s" % (self.url, instance)

    def close(self):
        self.stop_delivery()
        if self.httpd is not None:
            self.httpd.shutdown()
            self.httpd.server_close()
            self._serve_thread.join(5)
            self.httpd = None

    def _serve(self, h):
        t = time.time()
        parsed = urllib.parse.urlsplit(h.path)
        parts = parsed.path.strip("/").split("/")
        inst = "-"
        if len(parts) >= 2 and parts[0] == "i":
            inst, parts = parts[1], parts[2:]
        if len(parts) != 2 or not parts[0].startswith("bot"):
            return self._reply(h, 404, {"ok": False, "error_code": 404,
                                        "description": "Not Found"})
        token, method = parts[0][3:], parts[1]
        params = dict(urllib.parse.parse_qsl(parsed.query))
        n = int(h.headers.get("Content-Length") or 0)
        body = h.rfile.read(n) if 0 < n <= 1 << 20 else b""
        ctype = (h.headers.get("Content-Type") or "").split(";")[0].strip()
        try:
            if body and ctype == "application/json":
                params.update(json.loads(body))
            elif body and ctype == "application/x-www-form-urlencoded":
                params.update(urllib.parse.parse_qsl(body.decode()))
            elif body:
                raise ValueError("unsupported content type %r" % ctype)
        except ValueError as e:
            return self._reply(h, 400, {"ok": False, "error_code": 400,
                                        "description": "Bad Request: %s" % e})
        with self.cond:
            self.requests.append({"t": t, "instance": inst, "method": method,
                                  "params": {k: v for k, v in params.items()
                                             if k != "secret_token"}})
        if token != self.token:
            return self._reply(h, 401, {"ok": False, "error_code": 401,
                                        "description": "Unauthorized"})
        fn = getattr(self, "_m_" + method, None)
        if fn is None:
            return self._reply(h, 404, {"ok": False, "error_code": 404,
                                        "description": "Not Found: method "
                                        "not found"})
        try:
            result = fn(inst, params)
        except (ValueError, TypeError, KeyError) as e:
            return self._reply(h, 400, {"ok": False, "error_code": 400,
                                        "description": "Bad Request: %s" % e})
        self._reply(h, 200, {"ok": True, "result": result})

    @staticmethod
    def _reply(h, status, obj):
        data = json.dumps(obj).encode()
        try:
            h.send_response(status)
            h.send_header("Content-Type", "application/json")
            h.send_header("Content-Length", str(len(data)))
            h.end_headers()
            h.wfile.write(data)
        except OSError:
            pass  # the caller went away (a killed bot, an aborted poll)

    # -- methods -------------------------------------------------------------

    def _m_getMe(self, inst, p):
        return self.bot_user

    def _m_setWebhook(self, inst, p):
        url = str(p.get("url", ""))
        u = urllib.parse.urlsplit(url)
        if u.scheme != "http" or u.hostname != "127.0.0.1" or not u.port:
            raise ValueError("webhook url must be http://127.0.0.1:PORT/...")
        maxc = int(p.get("max_connections", 40))
        if not 1 <= maxc <= 100:
            raise ValueError("max_connections must be 1..100")
        with self.cond:
            self.webhooks[inst] = {
                "url": url, "host": u.hostname, "port": u.port,
                "path": (u.path or "/") + ("?" + u.query if u.query else ""),
                "max_connections": maxc,
                "secret": p.get("secret_token"),
                "sem": threading.BoundedSemaphore(maxc)}
            self.dead.discard(inst)
            self.cond.notify_all()
        return True

    def _m_deleteWebhook(self, inst, p):
        with self.cond:
            self.webhooks.pop(inst, None)
        return True

    def _m_sendMessage(self, inst, p):
        chat_id = p["chat_id"]
        text = str(p["text"])
        with self.cond:
            self.message_id += 1
            mid = self.message_id
            self.sent.append({"t": time.time(), "instance": inst,
                              "chat_id": chat_id, "text": text})
            self.cond.notify_all()
        return {"message_id": mid, "date": int(time.time()),
                "chat": {"id": int(chat_id), "type": "private"},
                "from": self.bot_user, "text": text}

    def _m_sendChatAction(self, inst, p):
        with self.cond:
            self.chat_actions.append({"t": time.time(), "instance": inst,
                                      "chat_id": p.get("chat_id"),
                                      "action": p.get("action")})
        self.chat_action_event.set()
        return True

    def _m_getUpdates(self, inst, p):
        now = time.time()
        offset = int(p.get("offset", 0) or 0)
        limit = max(1, min(100, int(p.get("limit", 100) or 100)))
        timeout = max(0.0, min(float(p.get("timeout", 0) or 0),
                               self.max_long_poll))
        with self.cond:
            for rec in self.open_polls.pop(inst, []):
                rec["t1"] = now
            self.pollers.add(inst)
            self.cond.notify_all()
            if (offset > 0 and self.released
                    and self.ignored_confirms < self.max_ignored_confirms
                    and any(u < offset for u in self.pending)
                    and self.rng.random() < self.ignore_confirm_p):
                # The confirmation is "lost": answer from the oldest
                # unconfirmed update, which this poller may have had.
                self.ignored_confirms += 1
                offset = 0
            if offset > 0:
                for u in [u for u in self.pending if u < offset]:
                    del self.pending[u]
            deadline = time.monotonic() + timeout
            batch = []
            for _ in range(1000):
                batch = sorted(u for u in self.pending if u >= offset)[:limit]
                left = deadline - time.monotonic()
                if batch or self.stopping or left <= 0:
                    break
                self.cond.wait(left)
            t = time.time()
            recs = []
            for u in batch:
                rec = {"update_id": u, "instance": inst, "channel": "poll",
                       "t0": t, "t1": None, "outcome": REACHED}
                self.deliveries.append(rec)
                recs.append(rec)
            self.open_polls[inst] = recs
            return [self.by_id[u] for u in batch]

    # -- delivery ------------------------------------------------------------

    def wait_for(self, webhooks=(), pollers=(), timeout=20.0):
        """Until these instances registered a webhook / called getUpdates."""
        deadline = time.monotonic() + timeout
        with self.cond:
            for _ in range(10000):
                if (all(w in self.webhooks for w in webhooks)
                        and all(p in self.pollers for p in pollers)):
                    return True
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.cond.wait(left)
        return False

    def start_delivery(self):
        self._release_thread = threading.Thread(target=self._release_all,
                                                name="fake-release",
                                                daemon=True)
        self._release_thread.start()

    def _release_all(self):
        for upd in self.updates:
            uid = upd["update_id"]
            with self.cond:
                if self.stopping:
                    return
                self.released += 1
                if uid in self.exclusive:
                    targets = [self.exclusive[uid]]
                else:
                    self.pending[uid] = upd
                    targets = sorted(self.webhooks)
                    self.cond.notify_all()
            for inst in targets:
                self._spawn_job(uid, inst,
                                self.rng.uniform(0, self.fanout_jitter), False)
            time.sleep(self.release_interval)

    def _spawn_job(self, uid, inst, delay, extra):
        th = threading.Thread(target=self._job, args=(uid, inst, delay, extra),
                              daemon=True)
        with self.cond:
            if self.stopping:
                return
            self._jobs_active += 1
            self._jobs.append(th)
        th.start()

    def _job(self, uid, inst, delay, extra):
        try:
            self._deliver(uid, inst, delay, extra)
        finally:
            with self.cond:
                self._jobs_active -= 1
                self.cond.notify_all()

    def _next_live(self, inst):
        with self.cond:
            live = sorted(w for w in self.webhooks if w not in self.dead)
        if not live:
            return None
        after = [w for w in live if w > inst]
        return (after or live)[0]

    def _deliver(self, uid, inst, delay, extra):
        time.sleep(delay)
        target = inst
        for attempt in range(self.max_attempts):
            if self.stopping:
                return
            with self.cond:
                wh = self.webhooks.get(target)
                dead = target in self.dead
            if wh is None or dead:
                nxt = self._next_live(target)
                if nxt is None:
                    break
                self.failovers.append((uid, target, nxt))
                target = nxt
                continue
            outcome = self._post(uid, target, wh)
            if outcome == 200:
                if not extra and self.rng.random() < self.redeliver_p:
                    self._spawn_job(uid, target,
                                    self.rng.uniform(0.05, 1.0), True)
                return
            if outcome == "refused":
                with self.cond:
                    self.dead.add(target)
                continue  # fails over at once on the next turn
            time.sleep(self.retry_backoff)
        with self.cond:
            self.gave_up.append((uid, inst))

    def _post(self, uid, inst, wh):
        """One POST of update uid to inst; returns 200, another status, or
        "timeout" / "reset" / "refused" / "busy" (no free connection)."""
        if not wh["sem"].acquire(timeout=self.webhook_timeout):
            return "busy"
        try:
            rec = {"update_id": uid, "instance": inst, "channel": "webhook",
                   "t0": time.time(), "t1": None, "outcome": None}
            body = json.dumps(self.by_id[uid]).encode()
            headers = {"Content-Type": "application/json"}
            if wh["secret"]:
                headers["X-Telegram-Bot-Api-Secret-Token"] = wh["secret"]
            conn = http.client.HTTPConnection(wh["host"], wh["port"],
                                              timeout=self.webhook_timeout)
            try:
                conn.request("POST", wh["path"], body, headers)
                resp = conn.getresponse()
                resp.read()
                outcome = resp.status
            except ConnectionRefusedError:
                outcome = "refused"
            except TimeoutError:
                outcome = "timeout"
            except (ConnectionError, http.client.HTTPException, OSError):
                outcome = "reset"
            finally:
                conn.close()
            rec["t1"] = time.time()
            rec["outcome"] = outcome
            if outcome != "refused":
                with self.cond:
                    self.deliveries.append(rec)
            return outcome
        finally:
            wh["sem"].release()

    # -- state ---------------------------------------------------------------

    def done_texts(self):
        with self.cond:
            return [s["text"] for s in self.sent]

    def settled(self, expected_texts):
        """Every update released, every expected text sent, no delivery job
        running, nothing pending for the pollers."""
        with self.cond:
            sent = {s["text"] for s in self.sent}
            return (self.released == len(self.updates)
                    and self._jobs_active == 0 and not self.pending
                    and all(t in sent for t in expected_texts))

    def stop_delivery(self, join=True):
        """No new deliveries, long polls answer at once; with join, wait
        (bounded) for the delivery threads."""
        with self.cond:
            self.stopping = True
            self.cond.notify_all()
            jobs = list(self._jobs)
        if not join:
            return
        if self._release_thread is not None:
            self._release_thread.join(5)
        deadline = time.monotonic() + self.webhook_timeout + 2
        for th in jobs:
            th.join(max(0.0, deadline - time.monotonic()))
        now = time.time()
        with self.cond:
            for recs in self.open_polls.values():
                for rec in recs:
                    if rec["t1"] is None:
                        rec["t1"] = now

    def delivery_stats(self):
        """Per update: deliveries that reached a bot, the instances they
        reached, and whether two of them to different instances overlapped
        in time."""
        with self.cond:
            recs = [dict(r) for r in self.deliveries]
        now = time.time()
        per = {u: [] for u in self.by_id}
        for r in recs:
            if r["t1"] is None:
                r["t1"] = now
            per[r["update_id"]].append(r)
        stats = {}
        for u, rs in per.items():
            concurrent = set()
            for i in range(len(rs)):
                for j in range(i + 1, len(rs)):
                    a, b = rs[i], rs[j]
                    if (a["instance"] != b["instance"]
                            and a["t0"] < b["t1"] and b["t0"] < a["t1"]):
                        concurrent.add(tuple(sorted((a["instance"],
                                                     b["instance"]))))
            stats[u] = {
                "deliveries": len(rs),
                "webhook": sum(1 for r in rs if r["channel"] == "webhook"),
                "poll": sum(1 for r in rs if r["channel"] == "poll"),
                "instances": sorted({r["instance"] for r in rs}),
                "concurrent_pairs": sorted(concurrent),
            }
        return stats
