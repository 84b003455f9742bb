"""tests/docker: what can be checked of docker/ without a Docker engine.

    /usr/bin/python3 -m pytest tests/docker -q

- The entrypoint (docker/entrypoint.sh), run outside a container against
  five real redis-servers with the environment docker/compose.yaml gives the
  sidecar: health over the socket, a lock round trip, metrics over TCP,
  SIGTERM -> exit 0; its errors (missing REDLOCKD_NODES -> exit 2, ...);
  exactly which flags each variable becomes (with a stub daemon).
- The health check script, through curl and through redlockctl.
- The example bot: two replicas, every update handled exactly once.
- The image's build stage (docker/build.sh) run on the build context that
  docker/Dockerfile.dockerignore leaves, and the binaries it installs.
- docker/Dockerfile: apt package lists against meson.build's dependency()
  calls and against what the binaries link; labels, user, volume, ports.
- docker/compose.yaml and docker/k8s/*.yaml: they parse, and name the same
  image, socket path, volume mount, metrics port and variables as the
  Dockerfile and the entrypoint.
- shellcheck on every shell script in docker/; the alert rules and
  docs/operations.md name only metrics the daemon exports.

Needs: a built daemon (build/sidecar/redlockd, or $REDLOCKD_BIN),
redis-server, curl, shellcheck, python3-yaml, and for the build test
meson/ninja with the -dev packages. A missing tool skips its tests, except
under CI=true, where it fails them. Every wait is bounded, every child
process is stopped, every temp dir removed.
"""

import json
import os
import re
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "harness"))

import rl  # noqa: E402  (the harness every Python suite shares)

DOCKER = REPO / "docker"
ENTRYPOINT = DOCKER / "entrypoint.sh"
HEALTHCHECK = DOCKER / "healthcheck.sh"
BUILD_SH = DOCKER / "build.sh"
DOCKERFILE = DOCKER / "Dockerfile"
BOT_DOCKERFILE = DOCKER / "example-bot" / "Dockerfile"
BOT = DOCKER / "example-bot" / "bot.py"
COMPOSE = DOCKER / "compose.yaml"
K8S = DOCKER / "k8s"
ALERTS = DOCKER / "prometheus" / "redlockd-alerts.yaml"
PROM_CONFIG = DOCKER / "prometheus" / "prometheus.yml"
OPS_DOC = REPO / "docs" / "operations.md"

BIN = Path(os.environ.get("REDLOCKD_BIN",
                          str(REPO / "build" / "sidecar" / "redlockd")))
REDIS_SERVER = os.environ.get("REDIS_SERVER", "redis-server")
CI = os.environ.get("CI", "") == "true"

STOP_BOUND_S = 5.0
READY_BOUND_S = 15.0


# ---- tools: skip when missing, fail under CI -----------------------------

def need(ok, what):
    """Skip (or, with CI=true, fail) when a prerequisite is missing."""
    if ok:
        return
    if CI:
        pytest.fail("missing under CI: %s" % what)
    pytest.skip("missing: %s" % what)


def need_tool(name, pkg=None):
    path = shutil.which(name)
    need(path is not None, "%s (apt-get install -y %s)" % (name, pkg or name))
    return path


def need_daemon():
    need(BIN.is_file() and os.access(str(BIN), os.X_OK),
         "the daemon at %s (meson setup build && ninja -C build)" % BIN)
    need_tool(REDIS_SERVER, "redis-server")


def load_yaml_all(path):
    try:
        import yaml
    except ImportError:
        need(False, "PyYAML (apt-get install -y python3-yaml)")
    with open(path, encoding="utf-8") as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def load_yaml(path):
    docs = load_yaml_all(path)
    assert len(docs) == 1, "%s: expected one YAML document" % path
    return docs[0]


def meson_version():
    m = re.search(r"version\s*:\s*'([^']+)'",
                  (REPO / "meson.build").read_text())
    assert m, "no project version in meson.build"
    return m.group(1)


# ---- processes, ports, sockets ---------------------------------------------

_CHILDREN = []


def _spawn(argv, **kw):
    kw.setdefault("stdin", subprocess.DEVNULL)
    p = rl.popen(argv, **kw)
    _CHILDREN.append(p)
    return p


def _reap(p, bound=STOP_BOUND_S):
    try:
        rl.reap(p, bound)
    except subprocess.TimeoutExpired:
        pass


@pytest.fixture(scope="module", autouse=True)
def _kill_leftovers():
    yield
    for p in _CHILDREN:
        _reap(p)
    _CHILDREN.clear()


free_port = rl.free_tcp_port


def wait_until(pred, bound, what, step=0.05):
    return rl.wait_for(pred, bound, what, step,
                       (OSError, ValueError, rl.Closed))


class Nodes(rl.Cluster):
    """Five redis-servers on 127.0.0.1 (free ports; each also on a unix
    socket in the temp dir), no persistence."""

    def __init__(self, password=None):
        super().__init__(5, password=password, tcp_port="free")
        self.password = password

    @property
    def ports(self):
        return [nd.tcp_port for nd in self.nodes]

    def exists_count(self, key):
        return sum(1 for nd in self.nodes if nd.cmd("EXISTS", key) == 1)


def http_unix(path, method, url, body=None):
    r = rl.http(path, method, url, body)
    return r.status, r.body


def http_tcp(port, method, url, body=None):
    r = rl.http(("127.0.0.1", port), method, url, body)
    return r.status, r.body


def base_env(**extra):
    """A clean environment: PATH only, no REDLOCKD_* from the caller."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
           "LANG": "C.UTF-8"}
    env.update({k: str(v) for k, v in extra.items() if v is not None})
    return env


class Sidecar:
    """docker/entrypoint.sh run as a container would run it."""

    def __init__(self, env, args=(), tmp=None, entrypoint=ENTRYPOINT,
                 as_user=()):
        self.tmp = tmp or tempfile.mkdtemp(prefix="rl-docker-sc.")
        os.makedirs(self.tmp, exist_ok=True)
        self.env = dict(env)
        self.args = list(args)
        self.entrypoint = entrypoint
        self.as_user = list(as_user)  # e.g. setpriv --reuid=... prefix
        self.proc = None
        self.stderr_path = os.path.join(self.tmp, "stderr.log")
        self.socket = self.env.get("REDLOCKD_SOCKET")

    def start(self):
        self._err = open(self.stderr_path, "wb")
        self.proc = _spawn(self.as_user + ["/bin/sh", str(self.entrypoint)] +
                           self.args, env=self.env, stdout=self._err,
                           stderr=self._err)
        return self

    def stderr(self):
        try:
            with open(self.stderr_path, "rb") as f:
                return f.read().decode(errors="replace")[-6000:]
        except OSError:
            return ""

    def wait_socket(self, bound=READY_BOUND_S):
        def up():
            if self.proc.poll() is not None:
                raise AssertionError("sidecar exited %s:\n%s"
                                     % (self.proc.returncode, self.stderr()))
            return os.path.exists(self.socket) and \
                http_unix(self.socket, "GET", "/v1/ping")[0] == 200
        wait_until(up, bound, "the sidecar's socket %s" % self.socket)
        return self

    def wait_healthy(self, bound=READY_BOUND_S):
        self.wait_socket(bound)
        wait_until(lambda: http_unix(self.socket, "GET", "/v1/health")[0]
                   == 200, bound, "health 200")
        return self

    def stop(self, bound=STOP_BOUND_S):
        """SIGTERM; (exit code, seconds)."""
        if self.proc.poll() is not None:
            return self.proc.returncode, 0.0
        t0 = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=bound)
        except subprocess.TimeoutExpired:
            code = None
        return code, time.monotonic() - t0

    def close(self):
        if self.proc is not None:
            _reap(self.proc)
        if getattr(self, "_err", None):
            self._err.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


def run_entrypoint(env, args=(), bound=10.0, as_user=()):
    return subprocess.run(list(as_user) + ["/bin/sh", str(ENTRYPOINT)] +
                          list(args), env=env, stdin=subprocess.DEVNULL,
                          capture_output=True, timeout=bound, text=True)


def setpriv(uid, gid):
    """Run as uid:gid with no supplementary groups, like a container's
    `user: uid:gid`. Needs root (and setpriv, util-linux)."""
    if os.geteuid() != 0:
        pytest.skip("switching users needs root")
    tool = need_tool("setpriv", "util-linux")
    return [tool, "--reuid=%d" % uid, "--regid=%d" % gid, "--clear-groups"]


def shared_tmp():
    """A temp dir other uids can traverse (pytest's tmp_path is 0700)."""
    d = tempfile.mkdtemp(prefix="rl-docker-uid.")
    os.chmod(d, 0o755)
    return d


# ---- what the files say -----------------------------------------------------

def compose():
    return load_yaml(COMPOSE)


def compose_sidecar_env():
    env = compose()["services"]["redlockd"]["environment"]
    assert isinstance(env, dict), "use the mapping form of environment"
    return {k: str(v) for k, v in env.items()}


def nodes_for_local(nodes_value, ports):
    """The compose REDLOCKD_NODES with redis-N:6379 -> 127.0.0.1:<port>."""
    uris = nodes_value.split(",")
    assert len(uris) == len(ports)
    out = []
    for uri, port in zip(uris, ports):
        m = re.fullmatch(r"redis://([a-z0-9-]+):6379(\?persistent=1)?", uri)
        assert m, "unexpected node URI in compose: %r" % uri
        out.append("redis://127.0.0.1:%d%s" % (port, m.group(2) or ""))
    return ",".join(out)


def parse_dockerfile(path):
    """[(stage name or None, [(INSTRUCTION, args)])], global ARGs."""
    text = Path(path).read_text()
    lines = []
    cur = ""
    for raw in text.splitlines():
        s = raw.strip()
        if not cur and (s.startswith("#") or not s):
            continue
        if cur and s.startswith("#"):
            continue  # comment inside a continued instruction
        if s.endswith("\\"):
            cur += s[:-1] + " "
            continue
        cur += s
        lines.append(cur)
        cur = ""
    assert not cur, "dangling line continuation in %s" % path
    global_args = {}
    stages = []
    for line in lines:
        instr, _, rest = line.partition(" ")
        instr = instr.upper()
        rest = rest.strip()
        if instr == "FROM":
            parts = rest.split()
            name = parts[2] if len(parts) >= 3 and parts[1].upper() == "AS" \
                else None
            image = parts[0]
            for k, v in global_args.items():
                image = image.replace("${%s}" % k, v).replace("$" + k, v)
            stages.append({"name": name, "image": image, "instr": []})
        elif not stages:
            assert instr == "ARG", "only ARG may precede FROM"
            k, _, v = rest.partition("=")
            global_args[k] = v
        else:
            stages[-1]["instr"].append((instr, rest))
    return stages, global_args


def stage(stages, name):
    for s in stages:
        if s["name"] == name:
            return s
    raise AssertionError("no stage %r" % name)


def apt_packages(st):
    """(always installed, installed conditionally) packages of a stage."""
    always, optional = set(), set()
    for instr, rest in st["instr"]:
        if instr != "RUN":
            continue
        conditional = rest.lstrip().startswith("if ")
        for seg in re.split(r"&&|;|\|\|", rest):
            toks = seg.split()
            toks = [t for t in toks if not re.fullmatch(r"[A-Z_]+=\S*", t)]
            if toks[:2] != ["apt-get", "install"]:
                continue
            pkgs = {t for t in toks[2:] if not t.startswith("-")}
            (optional if conditional else always).update(pkgs)
    return always, optional


def instr_args(st, name):
    return [rest for instr, rest in st["instr"] if instr == name]


def dockerfile_pairs(st, name):
    """The KEY=VALUE pairs of every `name` instruction (ENV, LABEL)."""
    out = {}
    for rest in instr_args(st, name):
        for tok in shlex.split(rest):
            k, _, v = tok.partition("=")
            out[k] = v
    return out


def dockerfile_env(st):
    return dockerfile_pairs(st, "ENV")


def dockerfile_arg_defaults(st):
    out = {}
    for rest in instr_args(st, "ARG"):
        k, _, v = rest.partition("=")
        out[k] = v
    return out


def dockerfile_labels(st):
    return dockerfile_pairs(st, "LABEL")


def entrypoint_default(var):
    m = re.search(r"\$\{%s:-([^}]*)\}" % var, ENTRYPOINT.read_text())
    assert m, "entrypoint has no default for %s" % var
    return m.group(1)


def installed_names():
    """Names docker/build.sh installs into the image's /usr/local/bin."""
    return set(re.findall(r'"\$out_dir/([a-z-]+)"', BUILD_SH.read_text()))


def k8s_docs():
    docs = {}
    for p in sorted(K8S.glob("*.yaml")):
        for d in load_yaml_all(p):
            docs.setdefault(d["kind"], []).append((p.name, d))
    return docs


def k8s_one(kind):
    """The one KIND of the bot's pod (the Redis nodes' are test_k8s.py's)."""
    docs = [(f, d) for f, d in k8s_docs().get(kind, [])
            if d["metadata"].get("labels", {}).get(
                "app.kubernetes.io/name") != "redlock-node"]
    assert len(docs) == 1, "expected one %s in docker/k8s" % kind
    return docs[0][1]


def pod_containers(dep):
    spec = dep["spec"]["template"]["spec"]
    return spec.get("initContainers", []) + spec.get("containers", [])


def k8s_sidecar(dep):
    cs = [c for c in pod_containers(dep)
          if c["image"].split(":")[0].endswith("redlockd")]
    assert len(cs) == 1, "one redlockd container in the pod"
    c = cs[0]
    if c in dep["spec"]["template"]["spec"].get("initContainers", []):
        assert c.get("restartPolicy") == "Always", \
            "an init-container sidecar needs restartPolicy: Always"
    return c


def k8s_bot(dep):
    cs = [c for c in pod_containers(dep) if "example-bot" in c["image"]]
    assert len(cs) == 1
    return cs[0]


# ---- dockerignore ----------------------------------------------------------

def _ignore_regex(pattern):
    """A .dockerignore pattern as a regex over slash-separated paths
    (moby/patternmatcher: ** spans directories, * and ? do not)."""
    p = pattern.strip().lstrip("/")
    p = os.path.normpath(p) if p not in ("", ".") else p
    out = ""
    i = 0
    while i < len(p):
        c = p[i]
        if p.startswith("**", i):
            i += 2
            if i < len(p) and p[i] == "/":
                out += "(?:.*/)?"
                i += 1
            else:
                out += ".*"
            continue
        if c == "*":
            out += "[^/]*"
        elif c == "?":
            out += "[^/]"
        else:
            out += re.escape(c)
        i += 1
    return re.compile("^" + out + "$")


def dockerignore_rules(path):
    """[(is an exception, regex, pattern)] of a .dockerignore file."""
    rules = []
    for line in Path(path).read_text().splitlines():
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        neg = s.startswith("!")
        pat = s[1:] if neg else s
        rules.append((neg, _ignore_regex(pat),
                      os.path.normpath(pat.strip().lstrip("/"))))
    return rules


def _may_reinclude_below(rules, d):
    """Could an exception pattern match something inside directory d?"""
    for neg, _, pat in rules:
        if not neg:
            continue
        lit = re.split(r"[*?\[]", pat, 1)[0]
        if lit == "" or lit.startswith(d + "/") or \
                (d + "/").startswith(lit) or d == lit.rstrip("/"):
            return True
    return False


def ignored(rel, rules):
    """moby's MatchesOrParentMatches: a pattern matching a parent directory
    matches everything below it; the last matching pattern wins."""
    parts = rel.split("/")
    parents = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    verdict = False
    for neg, rx, _ in rules:
        if any(rx.match(p) for p in parents):
            verdict = not neg
    return verdict


def filtered_context(rules):
    """Relative paths of the repository's files that survive the rules."""
    keep = []
    for root, dirs, files in os.walk(REPO):
        rel_root = os.path.relpath(root, REPO)
        rel_root = "" if rel_root == "." else rel_root + "/"
        if rel_root == "" and ".git" in dirs:
            dirs.remove(".git")  # .git is never needed; skip the walk
        # Prune whole directories that are ignored and cannot be re-included
        # (no exception pattern reaches inside them).
        for d in list(dirs):
            rel = rel_root + d
            if ignored(rel, rules) and not _may_reinclude_below(rules, rel):
                dirs.remove(d)
        for f in files:
            rel = rel_root + f
            if not ignored(rel, rules):
                keep.append(rel)
    return keep


# ---- fixtures ---------------------------------------------------------------

@pytest.fixture(scope="module")
def nodes():
    need_daemon()
    n = Nodes().start()
    try:
        yield n
    finally:
        n.stop()


def compose_env_for(nodes, tmp, **over):
    """The sidecar's environment from compose.yaml, made local: the nodes
    on 127.0.0.1, the socket in tmp, metrics on a free loopback port."""
    env = compose_sidecar_env()
    env["REDLOCKD_NODES"] = nodes_for_local(env["REDLOCKD_NODES"],
                                            nodes.ports)
    env["REDLOCKD_SOCKET"] = os.path.join(tmp, "run", "redlockd.sock")
    port = free_port()
    env["REDLOCKD_METRICS_LISTEN"] = "127.0.0.1:%d" % port
    env["REDLOCKD_LOG_FORMAT"] = env.get("REDLOCKD_LOG_FORMAT", "text")
    env["REDLOCKD_BIN"] = str(BIN)
    env.update({k: v for k, v in over.items()})
    os.makedirs(os.path.dirname(env["REDLOCKD_SOCKET"]), exist_ok=True)
    return base_env(**{k: v for k, v in env.items() if v is not None}), port


def start_compose_sidecar(nodes, tmp, healthy=True, entrypoint=ENTRYPOINT,
                          as_user=(), path_prefix=None, **over):
    """Start the entrypoint with compose_env_for(); wait for health (or
    only the socket). A free port can be taken by another process before
    the daemon binds it: then try again with another, twice at most."""
    for attempt in range(3):
        env, port = compose_env_for(nodes, tmp, **over)
        if path_prefix:
            env["PATH"] = path_prefix + ":" + env["PATH"]
        sc = Sidecar(env, tmp=os.path.join(tmp, "sc%d" % attempt),
                     entrypoint=entrypoint, as_user=as_user).start()
        sc.metrics_port = port
        try:
            if healthy:
                sc.wait_healthy()
            else:
                sc.wait_socket()
            return sc
        except AssertionError:
            lost_race = (sc.proc.poll() is not None and
                         "--metrics-listen" in sc.stderr() and
                         "in use" in sc.stderr())
            sc.close()
            if not lost_race or attempt == 2:
                raise
    raise AssertionError("unreachable")


@pytest.fixture(scope="module")
def sidecar(nodes):
    """The entrypoint with the compose environment, healthy."""
    tmp = tempfile.mkdtemp(prefix="rl-docker-sc.")
    try:
        sc = start_compose_sidecar(nodes, tmp)
        try:
            yield sc
            code, secs = sc.stop()
            assert code == 0, "SIGTERM gave %r:\n%s" % (code, sc.stderr())
        finally:
            sc.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture(scope="module")
def image_build(tmp_path_factory):
    """docker/build.sh run like the Dockerfile's build stage: on a copy of
    the context docker/Dockerfile.dockerignore leaves, release build."""
    need_tool("meson")
    need_tool("ninja", "ninja-build")
    need_tool("pkg-config")
    tmp = tmp_path_factory.mktemp("image-build")
    ctx = tmp / "src"
    rules = dockerignore_rules(DOCKER / "Dockerfile.dockerignore")
    for rel in filtered_context(rules):
        dst = ctx / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(str(REPO / rel), str(dst))
    out = tmp / "out"
    env = base_env(HOME=str(tmp))
    r = subprocess.run(["sh", "docker/build.sh", str(tmp / "build"),
                        str(out)], cwd=str(ctx), env=env,
                       stdin=subprocess.DEVNULL, capture_output=True,
                       text=True, timeout=540)
    assert r.returncode == 0, "docker/build.sh failed:\n%s\n%s" % (
        r.stdout[-4000:], r.stderr[-4000:])
    return {"ctx": ctx, "out": out, "stdout": r.stdout}


# =============================================================================
# The entrypoint against real redis-servers
# =============================================================================

def test_compose_environment_health_lock_metrics(sidecar, nodes):
    sock = sidecar.socket
    # Health over the socket: a quorum of the five compose nodes.
    code, body = http_unix(sock, "GET", "/v1/health")
    h = json.loads(body)
    assert code == 200 and h["ok"] is True and h["quorum"] == 3
    assert len(h["nodes"]) == 5 and all(n["up"] for n in h["nodes"])
    # The mode compose asks for.
    assert stat.S_IMODE(os.stat(sock).st_mode) == \
        int(compose_sidecar_env()["REDLOCKD_SOCKET_MODE"], 8)

    # A lock round trip over HTTP, under the compose prefix.
    prefix = compose_sidecar_env()["REDLOCKD_PREFIX"]
    res = "docker-test:%s" % uuid.uuid4().hex
    code, body = http_unix(sock, "POST", "/v1/locks",
                           {"resource": res, "ttl_ms": 10000, "fence": True})
    assert code == 200, body
    lk = json.loads(body)
    assert lk["ok"] and lk["resource"] == res and lk["validity_ms"] > 0
    assert isinstance(lk.get("fence"), int)
    assert nodes.exists_count("%slock:%s" % (prefix, res)) >= 3
    code, body = http_unix(sock, "POST", "/v1/locks",
                           {"resource": res, "ttl_ms": 10000})
    assert code == 409 and json.loads(body)["error"]["code"] == "busy"
    code, body = http_unix(sock, "DELETE", "/v1/locks/%s?resource=%s"
                           % (lk["lock"], res))
    assert code == 200, body
    assert nodes.exists_count("%slock:%s" % (prefix, res)) == 0
    code, body = http_unix(sock, "POST", "/v1/locks",
                           {"resource": res, "ttl_ms": 5000})
    assert code == 200, body
    again = json.loads(body)
    assert http_unix(sock, "DELETE", "/v1/locks/%s?resource=%s"
                     % (again["lock"], res))[0] == 200

    # NDJSON on the same socket.
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(5)
        s.connect(sock)
        s.sendall(b'{"op":"ping","id":7}\n')
        pong = json.loads(s.makefile("rb").readline())
    assert pong["id"] == 7 and pong["ok"] is True

    # Metrics and health over TCP on the metrics port; nothing else there.
    code, body = http_tcp(sidecar.metrics_port, "GET", "/metrics")
    text = body.decode()
    assert code == 200
    assert re.search(r"^redlockd_nodes_up 5$", text, re.M), text[:2000]
    ok = re.search(r'^redlockd_acquisitions_total\{result="ok"\} (\d+)$',
                   text, re.M)
    assert ok and int(ok.group(1)) >= 2
    assert http_tcp(sidecar.metrics_port, "GET", "/v1/health")[0] == 200
    assert http_tcp(sidecar.metrics_port, "POST", "/v1/locks",
                    json.dumps({"resource": res}))[0] != 200


def test_entrypoint_execs_the_daemon_without_secrets_in_argv(sidecar):
    pid = sidecar.proc.pid
    # exec: the process the container runtime started *is* the daemon.
    assert os.path.realpath("/proc/%d/exe" % pid) == os.path.realpath(BIN)
    argv = Path("/proc/%d/cmdline" % pid).read_bytes().split(b"\0")
    assert b"--metrics-listen" in argv
    assert not any(b"redis://" in a for a in argv), \
        "node URIs (and their passwords) must stay out of argv"


def test_sigterm_releases_and_exits_0(nodes, tmp_path):
    sc = start_compose_sidecar(nodes, str(tmp_path))
    try:
        res = "docker-test:term:%s" % uuid.uuid4().hex
        code, body = http_unix(sc.socket, "POST", "/v1/locks",
                               {"resource": res, "ttl_ms": 60000})
        assert code == 200, body
        # A session lock on an open NDJSON connection: its owner is told
        # (lost), then it is released at SIGTERM.
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(5)
        s.connect(sc.socket)
        sres = res + ":session"
        s.sendall(json.dumps({"op": "acquire", "resource": sres,
                              "ttl_ms": 60000, "id": 1}).encode() + b"\n")
        assert json.loads(s.makefile("rb").readline())["ok"] is True
        assert nodes.exists_count("redlock:lock:" + sres) >= 3
        code, secs = sc.stop()
        s.close()
        assert code == 0, "exit %r after SIGTERM:\n%s" % (code, sc.stderr())
        assert secs < STOP_BOUND_S
        assert not os.path.exists(sc.socket), "socket left behind"
        assert nodes.exists_count("redlock:lock:" + sres) == 0
        # The HTTP lock is left to its TTL: its holder is not connected to
        # be told, and any daemon can still extend or release it by token
        # (docs/operations.md, "Upgrading").
        assert nodes.exists_count("redlock:lock:" + res) >= 3
    finally:
        sc.close()


def test_password_file_secret(tmp_path):
    need_daemon()
    pw = "s3cret-" + uuid.uuid4().hex
    n = Nodes(password=pw).start()
    try:
        pwfile = tmp_path / "password"
        pwfile.write_text(pw + "\n")
        sc = start_compose_sidecar(n, str(tmp_path / "ok"),
                                   REDLOCKD_PASSWORD_FILE=str(pwfile))
        port = sc.metrics_port
        try:
            argv = Path("/proc/%d/cmdline" % sc.proc.pid).read_bytes()
            assert pw.encode() not in argv
            assert b"--redis-password-file\0%s" % str(pwfile).encode() \
                in argv
            for body in (http_unix(sc.socket, "GET", "/v1/health")[1],
                         http_tcp(port, "GET", "/metrics")[1]):
                assert pw.encode() not in body
            assert pw not in sc.stderr()
            assert sc.stop()[0] == 0
        finally:
            sc.close()
        # A wrong password: the daemon runs, but no node lets it in.
        pwfile.write_text("wrong\n")
        sc = start_compose_sidecar(n, str(tmp_path / "wrong"), healthy=False,
                                   REDLOCKD_PASSWORD_FILE=str(pwfile))
        try:
            time.sleep(0.5)
            assert http_unix(sc.socket, "GET", "/v1/health")[0] == 503
            assert sc.stop()[0] == 0
        finally:
            sc.close()
    finally:
        n.stop()


def test_dev_mode_without_nodes(tmp_path):
    need_daemon()
    sock = tmp_path / "run" / "redlockd.sock"
    sock.parent.mkdir()
    env = base_env(REDLOCKD_DEV="1", REDLOCKD_SOCKET=str(sock),
                   REDLOCKD_METRICS_LISTEN="off", REDLOCKD_BIN=str(BIN),
                   TMPDIR=str(tmp_path))
    sc = Sidecar(env, tmp=str(tmp_path / "sc")).start()
    try:
        sc.wait_healthy()
        argv = Path("/proc/%d/cmdline" % sc.proc.pid).read_bytes()
        assert b"--dev" in argv.split(b"\0")
        assert b"--metrics-listen" not in argv
        assert sc.stop()[0] == 0
    finally:
        sc.close()


# ---- configuration errors: exit 2 and a clear line --------------------------

def test_missing_nodes_is_a_clear_error(tmp_path):
    need(BIN.is_file(), "the daemon at %s" % BIN)
    (tmp_path / "run").mkdir()
    r = run_entrypoint(base_env(
        REDLOCKD_BIN=str(BIN),
        REDLOCKD_SOCKET=str(tmp_path / "run" / "redlockd.sock")))
    assert r.returncode == 2
    assert "REDLOCKD_NODES is not set" in r.stderr
    assert r.stderr.count("\n") == 1, r.stderr
    assert not (tmp_path / "run" / "redlockd.sock").exists()


@pytest.mark.parametrize("over,message", [
    ({"REDLOCKD_DEV": "yes"}, "REDLOCKD_DEV must be 1 or 0"),
    ({"REDLOCKD_DEV": "1"}, "unset REDLOCKD_NODES"),
    ({"REDLOCKD_PASSWORD_FILE": "/nonexistent/password"},
     "REDLOCKD_PASSWORD_FILE=/nonexistent/password is not a readable file"),
    ({"REDLOCKD_SOCKET": "/nonexistent/dir/redlockd.sock"},
     "socket directory /nonexistent/dir does not exist"),
    ({"REDLOCKD_BIN": "/nonexistent/redlockd"},
     "REDLOCKD_BIN=/nonexistent/redlockd is not an executable file"),
])
def test_entrypoint_refuses_bad_environment(tmp_path, over, message):
    need(BIN.is_file(), "the daemon at %s" % BIN)
    (tmp_path / "run").mkdir()
    env = base_env(REDLOCKD_BIN=str(BIN),
                   REDLOCKD_NODES="redis://127.0.0.1:1",
                   REDLOCKD_SOCKET=str(tmp_path / "run" / "redlockd.sock"))
    env.update(over)
    r = run_entrypoint(env)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert message in r.stderr
    assert r.stderr.startswith("redlockd-entrypoint: ")


def test_unwritable_socket_dir():
    """A volume the image's user cannot write: the entrypoint says so."""
    need(BIN.is_file(), "the daemon at %s" % BIN)
    as_user = setpriv(10001, 10001)
    base = shared_tmp()
    try:
        d = os.path.join(base, "run")
        os.mkdir(d, 0o755)  # root's, as a volume nobody prepared
        r = run_entrypoint(base_env(REDLOCKD_BIN=str(BIN),
                                    REDLOCKD_NODES="redis://127.0.0.1:1",
                                    REDLOCKD_SOCKET=d + "/redlockd.sock"),
                           as_user=as_user)
        assert r.returncode == 2, r.stderr
        assert "socket directory %s is not writable by uid 10001" % d \
            in r.stderr
        assert "10001:10001" in r.stderr
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_image_user_and_socket_group(nodes):
    """As compose and k8s run it: the sidecar as 10001:10001 in a volume
    it owns (0750); the socket 0660 redlockd:redlockd; a bot running with
    gid 10001 reaches it, another uid/gid does not."""
    as_sidecar = setpriv(10001, 10001)
    base = shared_tmp()
    try:
        run = os.path.join(base, "run")
        os.mkdir(run)
        os.chown(run, 10001, 10001)
        os.chmod(run, 0o750)
        sc = start_compose_sidecar(nodes, base, as_user=as_sidecar)
        try:
            st = os.stat(sc.socket)
            assert (st.st_uid, st.st_gid) == (10001, 10001)
            assert stat.S_IMODE(st.st_mode) == 0o660
            status = Path("/proc/%d/status" % sc.proc.pid).read_text()
            assert re.search(r"^Uid:\s+10001\s", status, re.M)
            curl_dir = os.path.join(base, "curl-bin")
            os.mkdir(curl_dir)
            os.chmod(curl_dir, 0o755)
            os.symlink(need_tool("curl"), os.path.join(curl_dir, "curl"))
            for uid, gid, ok in ((10002, 10001, True),
                                 (10003, 10003, False)):
                r = subprocess.run(
                    setpriv(uid, gid) + ["/bin/sh", str(HEALTHCHECK)],
                    env=base_env(REDLOCKD_SOCKET=sc.socket,
                                 PATH=curl_dir),
                    capture_output=True, text=True, timeout=15)
                assert (r.returncode == 0) == ok, (uid, gid, r.stdout,
                                                   r.stderr)
            assert sc.stop()[0] == 0
        finally:
            sc.close()
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_daemon_configuration_errors_keep_exit_2(tmp_path):
    """Errors the entrypoint leaves to the daemon still exit 2."""
    need(BIN.is_file(), "the daemon at %s" % BIN)
    (tmp_path / "run").mkdir()
    env = base_env(REDLOCKD_BIN=str(BIN),
                   REDLOCKD_NODES="redis://127.0.0.1:1",
                   REDLOCKD_SOCKET=str(tmp_path / "run" / "redlockd.sock"))
    for key, value in (("REDLOCKD_SOCKET_MODE", "999"),
                       ("REDLOCKD_METRICS_LISTEN", "nohost"),
                       ("REDLOCKD_NODES", "http://x"),
                       ("REDLOCKD_EXTRA_ARGS", "--no-such-flag")):
        e = dict(env, **{key: value})
        r = run_entrypoint(e)
        assert r.returncode == 2, (key, r.stderr)
        assert r.stderr.startswith("redlockd: "), (key, r.stderr)


# ---- exactly which flags each variable becomes (stub daemon) ----------------

@pytest.fixture
def stub(tmp_path):
    """A fake daemon that records its argv and environment."""
    out = tmp_path / "argv"
    bin_ = tmp_path / "fake-redlockd"
    bin_.write_text('#!/bin/sh\nfor a do printf "%%s\\n" "$a"; done > %s\n'
                    'env > %s.env\n' % (out, out))
    bin_.chmod(0o755)
    (tmp_path / "run").mkdir()

    def run(args=(), **env):
        e = base_env(REDLOCKD_BIN=str(bin_),
                     REDLOCKD_SOCKET=str(tmp_path / "run" / "r.sock"))
        e.update(env)
        if out.exists():
            out.unlink()
        r = run_entrypoint(e, args)
        assert r.returncode == 0, r.stderr
        environ = dict(line.split("=", 1) for line in
                       Path(str(out) + ".env").read_text().splitlines()
                       if "=" in line)
        return out.read_text().splitlines(), environ
    return run


def test_flags_from_environment(stub, tmp_path):
    pw = tmp_path / "pw"
    pw.write_text("x\n")
    argv, environ = stub(REDLOCKD_NODES="redis://a:1,redis://b:2",
                         REDLOCKD_SOCKET_MODE="0600",
                         REDLOCKD_PASSWORD_FILE=str(pw),
                         REDLOCKD_EXTRA_ARGS="--node-timeout-ms 50  "
                                             "--prefix a*b")
    assert argv == ["--socket-mode", "0600",
                    "--metrics-listen", "0.0.0.0:9477",
                    "--redis-password-file", str(pw),
                    "--node-timeout-ms", "50", "--prefix", "a*b"]
    # The daemon reads these itself; they are passed through untouched.
    assert environ["REDLOCKD_NODES"] == "redis://a:1,redis://b:2"
    assert environ["REDLOCKD_SOCKET"] == str(tmp_path / "run" / "r.sock")


def test_flags_defaults_and_argument_order(stub, tmp_path):
    argv, environ = stub(["--log-level", "debug", "--metrics-listen",
                          "127.0.0.1:1"], REDLOCKD_NODES="redis://a:1")
    # The container's arguments come last, so they win over the env.
    assert argv == ["--metrics-listen", "0.0.0.0:9477",
                    "--log-level", "debug",
                    "--metrics-listen", "127.0.0.1:1"]
    argv, _ = stub(["redlockd", "--prefix", "p:"],
                   REDLOCKD_NODES="redis://a:1",
                   REDLOCKD_METRICS_LISTEN="off")
    assert argv == ["--prefix", "p:"]


def test_default_socket_path():
    # Without REDLOCKD_SOCKET the image's path is used (its directory does
    # not exist here, so the check fires and names it).
    env = base_env(REDLOCKD_BIN="/bin/true", REDLOCKD_NODES="redis://a:1")
    r = run_entrypoint(env)
    default = entrypoint_default("REDLOCKD_SOCKET")
    if os.path.isdir(os.path.dirname(default)):
        pytest.skip("%s exists on this machine" % os.path.dirname(default))
    assert r.returncode == 2
    assert "socket directory %s does not exist" % os.path.dirname(default) \
        in r.stderr


def test_nodes_may_come_from_flags(stub):
    argv, _ = stub(["--node", "redis://a:1"])
    assert argv[-2:] == ["--node", "redis://a:1"]
    argv, _ = stub(REDLOCKD_EXTRA_ARGS="--config /etc/redlockd.json")
    assert argv[-2:] == ["--config", "/etc/redlockd.json"]
    argv, _ = stub(["--version"])
    assert argv[-1] == "--version"


def test_other_commands_run_as_given(tmp_path):
    r = run_entrypoint(base_env(), ["sh", "-c", "echo hello $0", "there"])
    assert r.returncode == 0 and r.stdout == "hello there\n"


# =============================================================================
# The health check script
# =============================================================================

def run_healthcheck(sock, route=None, path=None, script=HEALTHCHECK):
    env = base_env(REDLOCKD_SOCKET=sock, REDLOCKD_HEALTHCHECK_TIMEOUT_MS=2000)
    if path is not None:
        env["PATH"] = path
    args = ["/bin/sh", str(script)] + ([route] if route else [])
    return subprocess.run(args, env=env, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=15)


def curl_only_path(tmp_path):
    """A PATH with curl but no redlockctl: a dir of links to what sh needs."""
    d = tmp_path / "curl-bin"
    d.mkdir()
    os.symlink(need_tool("curl"), str(d / "curl"))
    return str(d)


def test_healthcheck_with_curl(sidecar, tmp_path):
    path = curl_only_path(tmp_path)
    r = run_healthcheck(sidecar.socket, path=path)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["ok"] is True
    assert run_healthcheck(sidecar.socket, "ping", path=path).returncode == 0
    r = run_healthcheck(str(tmp_path / "absent.sock"), path=path)
    assert r.returncode == 1
    assert run_healthcheck(sidecar.socket, "bogus", path=path).returncode \
        == 2


def test_healthcheck_without_quorum(tmp_path):
    """Readiness (health) fails without a quorum; liveness (ping) holds."""
    need_daemon()
    path = curl_only_path(tmp_path)
    dead = ",".join("redis://127.0.0.1:%d" % free_port() for _ in range(5))
    (tmp_path / "run").mkdir()
    env = base_env(REDLOCKD_BIN=str(BIN), REDLOCKD_NODES=dead,
                   REDLOCKD_SOCKET=str(tmp_path / "run" / "redlockd.sock"),
                   REDLOCKD_METRICS_LISTEN="off")
    sc = Sidecar(env, tmp=str(tmp_path / "sc")).start()
    try:
        sc.wait_socket()
        r = run_healthcheck(sc.socket, "health", path=path)
        assert r.returncode == 1
        assert json.loads(r.stdout)["ok"] is False  # the body is shown
        assert run_healthcheck(sc.socket, "ping", path=path).returncode == 0
        assert sc.stop()[0] == 0
    finally:
        sc.close()


def test_healthcheck_with_neither_client(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    r = run_healthcheck(str(tmp_path / "x.sock"), path=str(empty))
    assert r.returncode == 1
    assert "neither redlockctl nor curl" in r.stderr


# =============================================================================
# The example bot
# =============================================================================

def test_two_bot_replicas_handle_each_update_once(sidecar, tmp_path):
    first = int(time.time() * 1000) * 10  # fresh ids for this run
    n_updates = 15
    procs = []
    for name in ("bot-a", "bot-b"):
        env = base_env(REDLOCKD_SOCKET=sidecar.socket,
                       PYTHONPATH=str(REPO / "clients" / "python"),
                       PYTHONDONTWRITEBYTECODE="1",
                       BOT_NAME=name, BOT_FIRST_UPDATE=first,
                       BOT_UPDATES=n_updates, BOT_INTERVAL_MS=20,
                       BOT_WORK_MS=40, BOT_START_TIMEOUT_S=10)
        procs.append(_spawn([sys.executable, str(BOT)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    lines = []
    for p in procs:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err.decode()
        lines += [json.loads(x) for x in out.decode().splitlines()]
    deliveries = [x for x in lines if "update" in x]
    summaries = [x for x in lines if "summary" in x]
    assert len(summaries) == 2
    assert len(deliveries) == 2 * n_updates
    by_update = {}
    for d in deliveries:
        by_update.setdefault(d["update"], []).append(d["outcome"])
    assert sorted(by_update) == list(range(first, first + n_updates))
    for update, outcomes in by_update.items():
        assert sorted(outcomes) in (["busy", "handled"],
                                    ["done", "handled"]), (update, outcomes)


def test_bot_gives_up_without_daemon(tmp_path):
    env = base_env(REDLOCKD_SOCKET=str(tmp_path / "none.sock"),
                   PYTHONPATH=str(REPO / "clients" / "python"),
                   PYTHONDONTWRITEBYTECODE="1", BOT_START_TIMEOUT_S=1)
    r = subprocess.run([sys.executable, str(BOT)], env=env,
                       stdin=subprocess.DEVNULL, capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 1 and "not healthy" in r.stderr


# =============================================================================
# The image's build stage, outside Docker
# =============================================================================

def test_build_stage_on_the_filtered_context(image_build):
    out = image_build["out"]
    names = sorted(os.listdir(str(out)))
    expected = {"redlockd", "redlockd-entrypoint", "redlockd-healthcheck"}
    if (REPO / "clients" / "redlockctl" / "meson.build").exists():
        expected.add("redlockctl")
    assert set(names) == expected
    assert installed_names() == {"redlockd", "redlockctl",
                                 "redlockd-entrypoint",
                                 "redlockd-healthcheck"}
    for n in names:
        assert os.stat(str(out / n)).st_mode & 0o777 == 0o755
    v = subprocess.run([str(out / "redlockd"), "--version"],
                       capture_output=True, text=True, timeout=10)
    assert v.stdout.strip() == "redlockd %s" % meson_version()
    # A release build: no debug info left after install -s.
    file_ = shutil.which("file")
    if file_:
        desc = subprocess.run([file_, str(out / "redlockd")],
                              capture_output=True, text=True).stdout
        assert "not stripped" not in desc
    # Nothing that the image does not need went into the context.
    ctx = image_build["ctx"]
    for junk in ("build", ".git", "clients/node", "clients/python",
                 "clients/go", "tests/bench/out", "docker/compose.yaml"):
        assert not (ctx / junk).exists(), junk


def test_image_layout_runs(image_build, nodes, tmp_path):
    """/usr/local/bin as the image has it: the installed entrypoint with
    its default REDLOCKD_BIN replaced, the health check with redlockctl."""
    out = image_build["out"]
    sc = start_compose_sidecar(nodes, str(tmp_path),
                               entrypoint=out / "redlockd-entrypoint",
                               path_prefix=str(out),
                               REDLOCKD_BIN=str(out / "redlockd"))
    try:
        path = str(out) + ":/usr/bin:/bin"
        if (out / "redlockctl").exists():
            # redlockctl is first on PATH: the image's health check.
            r = run_healthcheck(sc.socket, "health", path=path,
                                script=out / "redlockd-healthcheck")
            assert r.returncode == 0, r.stdout + r.stderr
            assert json.loads(r.stdout)["ok"] is True
            r = run_healthcheck(sc.socket, "ping", path=path,
                                script=out / "redlockd-healthcheck")
            assert r.returncode == 0, r.stdout + r.stderr
            r = run_healthcheck(str(tmp_path / "absent.sock"), "health",
                                path=path,
                                script=out / "redlockd-healthcheck")
            assert r.returncode == 1
        assert sc.stop()[0] == 0
    finally:
        sc.close()


# =============================================================================
# docker/Dockerfile
# =============================================================================

# meson dependency() name -> Debian -dev package. A new dependency() must be
# added here and to the build stage.
MESON_DEV_PACKAGES = {
    "hiredis": "libhiredis-dev",
    "libevent": "libevent-dev",
    "uuid": "uuid-dev",
    "libcjson": "libcjson-dev",
    "openssl": "libssl-dev",
    "threads": "libc6-dev",  # pthreads, in libc
    "cmocka": "libcmocka-dev",
}
TEST_ONLY = {"cmocka"}


def meson_dependencies():
    """{name: required?} over every meson.build of the source tree."""
    deps = {}
    for p in REPO.rglob("meson.build"):
        rel = p.relative_to(REPO).as_posix()
        if rel.startswith(("build", ".git")) or "node_modules" in rel:
            continue
        for m in re.finditer(r"dependency\(\s*'([^']+)'([^)]*)\)",
                             p.read_text()):
            optional = re.search(r"required\s*:\s*false", m.group(2))
            deps[m.group(1)] = deps.get(m.group(1), False) or not optional
    return deps


def test_build_stage_installs_every_meson_dependency():
    stages, gargs = parse_dockerfile(DOCKERFILE)
    build = stage(stages, "build")
    pkgs, _ = apt_packages(build)
    for tool in ("gcc", "libc6-dev", "meson", "ninja-build", "pkg-config"):
        assert tool in pkgs, tool
    deps = meson_dependencies()
    assert {"hiredis", "libevent", "uuid", "libcjson"} <= set(deps)
    for name, required in deps.items():
        assert name in MESON_DEV_PACKAGES, \
            "dependency('%s') has no -dev package in the map" % name
        if required:
            assert MESON_DEV_PACKAGES[name] in pkgs, \
                "build stage lacks %s for dependency('%s')" % (
                    MESON_DEV_PACKAGES[name], name)
    # scripts/deps.sh's build packages are all there too.
    m = re.search(r'REDLOCKD_BUILD_PKGS="([^"]+)"',
                  (REPO / "scripts" / "deps.sh").read_text())
    if m:
        assert set(m.group(1).split()) <= pkgs


def _dpkg_owner(path):
    r = subprocess.run(["dpkg", "-S", path], capture_output=True, text=True)
    if r.returncode != 0:
        real = os.path.realpath(path)
        r = subprocess.run(["dpkg", "-S", real], capture_output=True,
                           text=True)
    assert r.returncode == 0, "no package owns %s" % path
    return r.stdout.split(":", 1)[0].strip()


def _linked_packages(binary):
    r = subprocess.run(["ldd", str(binary)], capture_output=True, text=True,
                       timeout=10)
    assert r.returncode == 0, r.stderr
    pkgs = set()
    for line in r.stdout.splitlines():
        m = re.search(r"=>\s+(/\S+)", line)
        if m:
            pkgs.add(_dpkg_owner(m.group(1)))
    return pkgs


def test_runtime_stage_has_exactly_the_runtime_libraries(request):
    stages, _ = parse_dockerfile(DOCKERFILE)
    runtime = stage(stages, "runtime")
    build = stage(stages, "build")
    always, optional = apt_packages(runtime)
    build_pkgs, _ = apt_packages(build)
    # Not a library: the system CA store rediss:// verifies against.
    data = {"ca-certificates"}
    # hiredis: its header only (redisReply); nothing links the library.
    assert always == {"libevent-2.1-7", "libuuid1", "libcjson1",
                      "libssl3"} | data
    assert optional <= {"curl"}
    assert not any(p.endswith("-dev") for p in always | optional)
    assert "libcmocka0" not in always
    need_tool("dpkg")
    need_tool("ldd", "libc-bin")
    # Each runtime library is what a -dev package of the build stage
    # depends on (bookworm names; this machine is the reference).
    dev_deps = set()
    for dev in build_pkgs:
        if not dev.endswith("-dev"):
            continue
        r = subprocess.run(["dpkg-query", "-W", "-f=${Depends}", dev],
                           capture_output=True, text=True)
        need(r.returncode == 0, "%s installed (to read its Depends)" % dev)
        dev_deps |= {re.split(r"[\s(:]", d.strip())[0]
                     for d in r.stdout.split(",")}
    assert always - data <= dev_deps, always - data - dev_deps
    # And it is exactly what the binaries link, besides libc: the image's
    # own binaries when they could be built here, else build/'s daemon.
    try:
        out = request.getfixturevalue("image_build")["out"]
        binaries = [out / "redlockd"]
        if (out / "redlockctl").exists():
            binaries.append(out / "redlockctl")
    except pytest.skip.Exception:
        need(BIN.is_file(), "the daemon at %s" % BIN)
        binaries = [BIN]
    linked = set()
    for b in binaries:
        linked |= _linked_packages(b)
    linked -= {"libc6"}
    assert linked == always - data, "runtime stage %s, binaries link %s" % (
        sorted(always), sorted(linked))


def test_dockerfile_stages_user_volume_ports_labels():
    stages, gargs = parse_dockerfile(DOCKERFILE)
    assert [s["name"] for s in stages] == ["build", "runtime"]
    assert gargs.get("DEBIAN_IMAGE") == "debian:bookworm-slim"
    for s in stages:
        assert s["image"] == "debian:bookworm-slim"
    rt = stage(stages, "runtime")
    # The build stage runs docker/build.sh, which the tests run too.
    assert any("docker/build.sh" in r for r in
               instr_args(stage(stages, "build"), "RUN"))
    args = dockerfile_arg_defaults(rt)
    assert args["VERSION"] == meson_version()
    labels = dockerfile_labels(rt)
    assert labels["org.opencontainers.image.version"] == "${VERSION}"
    assert labels["org.opencontainers.image.source"] == "${SOURCE}"
    assert args["SOURCE"].startswith("https://")
    # Non-root, numeric, the ids the RUN creates.
    user = instr_args(rt, "USER")
    assert user == ["10001:10001"]
    runs = " ".join(instr_args(rt, "RUN"))
    assert "--gid 10001" in runs and "--uid 10001" in runs
    assert "install -d -o 10001 -g 10001" in runs
    # Socket volume and path, metrics port.
    env = dockerfile_env(rt)
    sock = env["REDLOCKD_SOCKET"]
    assert sock == entrypoint_default("REDLOCKD_SOCKET")
    assert instr_args(rt, "VOLUME") == ['["%s"]' % os.path.dirname(sock)]
    assert "/run/redlockd" in runs
    listen = env["REDLOCKD_METRICS_LISTEN"]
    assert listen == entrypoint_default("REDLOCKD_METRICS_LISTEN")
    port = listen.rsplit(":", 1)[1]
    assert instr_args(rt, "EXPOSE") == [port]
    # Entrypoint and health check are what build.sh installs.
    ep = json.loads(instr_args(rt, "ENTRYPOINT")[0])
    assert ep == ["/usr/local/bin/redlockd-entrypoint"]
    hc = instr_args(rt, "HEALTHCHECK")[0]
    cmd = json.loads(hc.split("CMD", 1)[1])
    assert cmd == ["/usr/local/bin/redlockd-healthcheck", "health"]
    for p in ep + cmd[:1]:
        assert os.path.basename(p) in installed_names()
    assert instr_args(rt, "STOPSIGNAL") == ["SIGTERM"]
    copies = instr_args(rt, "COPY")
    assert copies == ["--from=build /out/ /usr/local/bin/"]


def test_copy_sources_survive_the_dockerignore():
    for dockerfile in (DOCKERFILE, BOT_DOCKERFILE):
        ignore = Path(str(dockerfile) + ".dockerignore")
        assert ignore.is_file(), \
            "%s: BuildKit reads %s for a context at the repo root" % (
                dockerfile, ignore.name)
        rules = dockerignore_rules(ignore)
        kept = filtered_context(rules)
        stages, _ = parse_dockerfile(dockerfile)
        for st in stages:
            for rest in instr_args(st, "COPY"):
                if rest.startswith("--from"):
                    continue
                src = rest.split()[0]
                if src == ".":
                    continue
                src = src.rstrip("/")
                assert any(k == src or k.startswith(src + "/")
                           for k in kept), \
                    "%s: COPY %s is excluded by %s" % (
                        dockerfile.name, src, ignore.name)
    # The sidecar's context holds what docker/build.sh needs.
    kept = set(filtered_context(dockerignore_rules(
        DOCKER / "Dockerfile.dockerignore")))
    for need_file in ("meson.build", "sidecar/main.c", "sidecar/meson.build",
                      "tests/meson.build", "tests/unit/meson.build",
                      "docker/build.sh", "docker/entrypoint.sh",
                      "docker/healthcheck.sh"):
        assert need_file in kept, need_file
    assert not any(k.startswith(("build/", ".git/", "clients/node/"))
                   or "/node_modules/" in k or k.endswith(".sock")
                   for k in kept)


def test_dockerignore_matcher():
    rules = [(False, _ignore_regex("*"), "*"),
             (True, _ignore_regex("sidecar/"), "sidecar"),
             (False, _ignore_regex("**/node_modules"), "**/node_modules"),
             (True, _ignore_regex("clients/redlockctl"),
              "clients/redlockctl")]
    assert ignored("README.md", rules)
    assert not ignored("sidecar/main.c", rules)
    assert ignored("sidecar/node_modules/x.js", rules)
    assert ignored("clients/node/index.js", rules)
    assert not ignored("clients/redlockctl/redlockctl.c", rules)
    assert _ignore_regex("**/*.sock").match("a/b/c.sock")
    assert _ignore_regex("**/*.sock").match("c.sock")
    assert _may_reinclude_below(rules, "clients")
    assert not _may_reinclude_below(rules, "clients/node")
    assert not _may_reinclude_below(rules, "build")


# =============================================================================
# compose.yaml, k8s, and their agreement with the image
# =============================================================================

def known_env_names():
    """Every REDLOCKD_* variable the daemon, entrypoint or check reads."""
    names = set(re.findall(r"\bREDLOCKD_[A-Z_]+",
                           ENTRYPOINT.read_text() + HEALTHCHECK.read_text()))
    if BIN.is_file():
        h = subprocess.run([str(BIN), "--help"], capture_output=True,
                           text=True, timeout=10).stdout
        names |= set(re.findall(r"\bREDLOCKD_[A-Z_]+", h))
    else:
        names |= set(re.findall(
            r'"(REDLOCKD_[A-Z_]+)"',
            (REPO / "sidecar" / "config.c").read_text()))
    return names


def test_compose_nodes_are_five_independent_aof_redis():
    c = compose()
    svcs = c["services"]
    redis = {k: v for k, v in svcs.items() if k.startswith("redis-")}
    assert sorted(redis) == ["redis-%d" % i for i in range(1, 6)]
    vols = set()
    for name, s in redis.items():
        assert re.fullmatch(r"redis:7(\.\d+)*-bookworm", s["image"]), \
            s["image"]
        cmd = s["command"]
        assert isinstance(cmd, list) and cmd[0] == "redis-server"
        joined = " ".join(str(x) for x in cmd)
        assert "--appendonly yes" in joined
        assert "--appendfsync always" in joined
        assert "--maxmemory-policy noeviction" in joined
        assert not re.search(r"replicaof|slaveof|cluster-enabled", joined)
        (vol,) = s["volumes"]
        vname, path = vol.split(":")
        assert path == "/data"
        vols.add(vname)
        assert vname in c["volumes"]
    assert len(vols) == 5, "each node its own volume"
    # Every node in the sidecar's list, once, with ?persistent=1 (AOF fsync).
    uris = compose_sidecar_env()["REDLOCKD_NODES"].split(",")
    hosts = []
    for u in uris:
        m = re.fullmatch(r"redis://(redis-\d):6379\?persistent=1", u)
        assert m, u
        hosts.append(m.group(1))
    assert sorted(hosts) == sorted(redis)
    # Nodes on a network only the sidecar shares.
    nets = c["networks"]
    for s in redis.values():
        for n in s["networks"]:
            assert nets[n].get("internal") is True


def test_compose_sidecar_and_bots_agree_with_the_image():
    c = compose()
    svcs = c["services"]
    sc = svcs["redlockd"]
    stages, _ = parse_dockerfile(DOCKERFILE)
    rt = stage(stages, "runtime")
    denv = dockerfile_env(rt)
    version = meson_version()
    # Build and image.
    assert sc["build"]["dockerfile"] == "docker/Dockerfile"
    assert (COMPOSE.parent / sc["build"]["context"]).resolve() == REPO
    assert sc["image"] == "redlockd:%s" % version
    assert str(sc["build"]["args"]["VERSION"]) == version
    # Environment: names the entrypoint or daemon know; same socket/port.
    env = compose_sidecar_env()
    known = known_env_names()
    assert set(env) <= known, set(env) - known
    assert env["REDLOCKD_SOCKET"] == denv["REDLOCKD_SOCKET"]
    sock_dir = os.path.dirname(env["REDLOCKD_SOCKET"])
    assert env["REDLOCKD_METRICS_LISTEN"] == denv["REDLOCKD_METRICS_LISTEN"]
    port = int(env["REDLOCKD_METRICS_LISTEN"].rsplit(":", 1)[1])
    assert "127.0.0.1:%d:%d" % (port, port) in sc["ports"]
    (vol,) = sc["volumes"]
    vname, mount = vol.split(":")[:2]
    assert mount == sock_dir and vname in c["volumes"]
    assert sc.get("read_only") is True and sc.get("cap_drop") == ["ALL"]
    # Bots: two replicas on the same volume, same socket path, the
    # socket's group, started once the sidecar is healthy.
    bot = svcs["bot"]
    assert bot["deploy"]["replicas"] == 2
    assert bot["build"]["dockerfile"] == "docker/example-bot/Dockerfile"
    assert bot["image"] == "redlockd-example-bot:%s" % version
    assert bot["environment"]["REDLOCKD_SOCKET"] == env["REDLOCKD_SOCKET"]
    (bvol,) = bot["volumes"]
    assert bvol.split(":")[:2] == [vname, sock_dir]
    assert bot["user"].split(":")[1] == "10001"
    assert bot["depends_on"]["redlockd"]["condition"] == "service_healthy"
    # Prometheus scrapes the same port and loads the same rules.
    prom = load_yaml(PROM_CONFIG)
    targets = prom["scrape_configs"][0]["static_configs"][0]["targets"]
    assert targets == ["redlockd:%d" % port]
    mounts = svcs["prometheus"]["volumes"]
    assert any(m.startswith("./prometheus/redlockd-alerts.yaml:") and
               m.split(":")[1] in prom["rule_files"] for m in mounts)


def test_k8s_manifests_agree_with_the_image():
    docs = k8s_docs()
    dep = k8s_one("Deployment")
    cm = k8s_one("ConfigMap")
    svc = k8s_one("Service")
    secret = k8s_one("Secret")
    version = meson_version()
    stages, _ = parse_dockerfile(DOCKERFILE)
    denv = dockerfile_env(stage(stages, "runtime"))
    sock = denv["REDLOCKD_SOCKET"]
    sock_dir = os.path.dirname(sock)
    port = int(denv["REDLOCKD_METRICS_LISTEN"].rsplit(":", 1)[1])
    known = known_env_names()

    pod = dep["spec"]["template"]
    spec = pod["spec"]
    sc = k8s_sidecar(dep)
    bot = k8s_bot(dep)
    assert sc["image"] == "redlockd:%s" % version
    assert bot["image"] == "redlockd-example-bot:%s" % version
    assert dep["spec"]["selector"]["matchLabels"].items() <= \
        pod["metadata"]["labels"].items()

    # ConfigMap -> environment.
    assert {"REDLOCKD_NODES", "REDLOCKD_PREFIX", "REDLOCKD_LOG_FORMAT"} <= \
        set(cm["data"])
    assert set(cm["data"]) <= known, set(cm["data"]) - known
    assert sc["envFrom"] == [{"configMapRef":
                              {"name": cm["metadata"]["name"]}}]
    assert cm["data"]["REDLOCKD_SOCKET"] == sock
    assert cm["data"]["REDLOCKD_METRICS_LISTEN"] == \
        denv["REDLOCKD_METRICS_LISTEN"]
    uris = cm["data"]["REDLOCKD_NODES"].split(",")
    assert len(uris) == 5 and len(set(uris)) == 5
    for u in uris:
        assert re.fullmatch(r"redis://[a-z0-9.-]+:\d+\?persistent=1", u), u
        assert "@" not in u, "the password belongs in the Secret"

    # Socket: one emptyDir at the image's path in both containers.
    vols = {v["name"]: v for v in spec["volumes"]}
    sock_vol = [m for m in sc["volumeMounts"] if m["mountPath"] == sock_dir]
    assert len(sock_vol) == 1
    assert "emptyDir" in vols[sock_vol[0]["name"]]
    bot_mounts = {m["name"]: m for m in bot["volumeMounts"]}
    assert bot_mounts[sock_vol[0]["name"]]["mountPath"] == sock_dir
    bot_env = {e["name"]: e["value"] for e in bot.get("env", [])}
    assert bot_env["REDLOCKD_SOCKET"] == sock

    # Secret -> file -> REDLOCKD_PASSWORD_FILE.
    sc_env = {e["name"]: e.get("value") for e in sc.get("env", [])}
    pwfile = sc_env["REDLOCKD_PASSWORD_FILE"]
    svol = [v for v in spec["volumes"] if "secret" in v]
    assert len(svol) == 1
    src = svol[0]["secret"]
    assert src["secretName"] == secret["metadata"]["name"]
    (item,) = src["items"]
    assert item["key"] in secret["stringData"]
    (smount,) = [m for m in sc["volumeMounts"] if m["name"] == svol[0]["name"]]
    assert smount.get("readOnly") is True
    assert pwfile == smount["mountPath"] + "/" + item["path"]
    assert "secret.example.yaml" not in load_yaml(
        K8S / "kustomization.yaml")["resources"]

    # Probes through the socket with the installed health check.
    hc = "/usr/local/bin/redlockd-healthcheck"
    assert os.path.basename(hc) in installed_names()
    assert sc["readinessProbe"]["exec"]["command"] == [hc, "health"]
    assert sc["livenessProbe"]["exec"]["command"] == [hc, "ping"]

    # Metrics port, annotations, Service.
    (cport,) = sc["ports"]
    assert cport["containerPort"] == port
    ann = pod["metadata"]["annotations"]
    assert ann["prometheus.io/scrape"] == "true"
    assert ann["prometheus.io/port"] == str(port)
    assert ann["prometheus.io/path"] == "/metrics"
    (sport,) = svc["spec"]["ports"]
    assert sport["port"] == port and sport["targetPort"] == cport["name"]
    assert svc["spec"]["selector"].items() <= \
        pod["metadata"]["labels"].items()

    # Hardening and resources on every container.
    psc = spec["securityContext"]
    assert psc["runAsNonRoot"] is True and psc["fsGroup"] == 10001
    assert spec.get("automountServiceAccountToken") is False
    for c in pod_containers(dep):
        s = c["securityContext"]
        assert s["runAsNonRoot"] is True, c["name"]
        assert s["readOnlyRootFilesystem"] is True, c["name"]
        assert s["allowPrivilegeEscalation"] is False, c["name"]
        assert s["capabilities"]["drop"] == ["ALL"], c["name"]
        r = c["resources"]
        assert {"cpu", "memory"} <= set(r["requests"]), c["name"]
        assert "memory" in r["limits"], c["name"]
    # The socket's group: the bot runs with the sidecar's gid.
    assert sc["securityContext"]["runAsUser"] == 10001
    assert bot["securityContext"]["runAsGroup"] == 10001
    assert bot["securityContext"]["runAsUser"] != 10001

    # kustomization lists files that exist and the same images.
    kz = load_yaml(K8S / "kustomization.yaml")
    for r in kz["resources"]:
        assert (K8S / r).is_file(), r
    assert {i["name"] for i in kz["images"]} == {"redlockd",
                                                 "redlockd-example-bot"}
    for i in kz["images"]:
        assert i["newTag"] == version
    assert set(docs) == {"ConfigMap", "Deployment", "Service", "Secret",
                         "Kustomization", "NetworkPolicy", "StatefulSet",
                         "PodDisruptionBudget"}


def test_bot_dockerfile_matches_the_socket_group():
    stages, _ = parse_dockerfile(BOT_DOCKERFILE)
    (st,) = stages
    assert st["image"] == "debian:bookworm-slim"
    assert instr_args(st, "USER") == ["10002:10001"]
    runs = " ".join(instr_args(st, "RUN"))
    assert "--gid 10001" in runs and "install -d -o 10001 -g 10001" in runs
    pkgs, _ = apt_packages(st)
    assert pkgs == {"python3"}
    env = dockerfile_env(st)
    side = dockerfile_env(stage(parse_dockerfile(DOCKERFILE)[0], "runtime"))
    assert env["REDLOCKD_SOCKET"] == side["REDLOCKD_SOCKET"]


# =============================================================================
# Shell scripts, alert rules, the operations guide
# =============================================================================

def shell_scripts():
    out = []
    for p in sorted(DOCKER.rglob("*")):
        if not p.is_file():
            continue
        head = p.read_bytes()[:64]
        shebang = rb"#!\s*/(usr/)?bin/(env )?(ba|da)?sh"
        if p.suffix == ".sh" or re.match(shebang, head):
            out.append(p)
    return out


def test_shell_scripts_are_posix_and_shellcheck_clean():
    scripts = shell_scripts()
    assert {p.name for p in scripts} >= {"entrypoint.sh", "healthcheck.sh",
                                         "build.sh"}
    for p in scripts:
        assert p.read_text().startswith("#!/bin/sh\n"), p
        for sh in ("sh", "dash"):
            if shutil.which(sh):
                r = subprocess.run([sh, "-n", str(p)], capture_output=True,
                                   text=True)
                assert r.returncode == 0, (sh, p, r.stderr)
    sc = need_tool("shellcheck")
    r = subprocess.run([sc, "--shell=sh", "--severity=style"] +
                       [str(p) for p in scripts],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


def alert_rules():
    return load_yaml(ALERTS)


def metric_names_in(text):
    names = set(re.findall(r"\bredlockd_[a-z_]+[a-z]", text))
    out = set()
    for n in names:
        for suffix in ("_bucket", "_sum", "_count"):
            if n.endswith(suffix):
                n = n[:-len(suffix)]
        out.add(n)
    return out


def exported_metrics(sidecar):
    body = http_tcp(sidecar.metrics_port, "GET", "/metrics")[1].decode()
    return set(re.findall(r"^# TYPE (\S+) ", body, re.M)), body


def test_alert_rules_use_exported_metrics(sidecar):
    rules = alert_rules()
    exported, body = exported_metrics(sidecar)
    exprs = [r["expr"] for g in rules["groups"] for r in g["rules"]]
    alerts = {r["alert"] for g in rules["groups"] for r in g["rules"]}
    assert {"RedlockdAcquireNoQuorum", "RedlockdLocksLost",
            "RedlockdNodeDown", "RedlockdQuorumAtRisk"} <= alerts
    used = metric_names_in("\n".join(exprs))
    assert used, exprs
    assert used <= exported, used - exported
    assert 'result="no_quorum"' in body.replace(" ", "")  # label value exists
    # promtool is optional (Debian's prometheus package ships it): the
    # rules' syntax and their unit tests (redlockd-alerts.test.yaml).
    promtool = os.environ.get("PROMTOOL") or shutil.which("promtool")
    if promtool:
        for args in (["check", "rules", ALERTS.name],
                     ["test", "rules", "redlockd-alerts.test.yaml"]):
            r = subprocess.run([promtool] + args, cwd=str(ALERTS.parent),
                               capture_output=True, text=True, timeout=60)
            assert r.returncode == 0, r.stdout + r.stderr


def test_operations_guide(sidecar):
    assert OPS_DOC.is_file()
    text = OPS_DOC.read_text()
    exported, _ = exported_metrics(sidecar)
    named = metric_names_in(text)
    assert named <= exported, named - exported
    for must in ("docker compose -f docker/compose.yaml up --build",
                 "appendfsync always", "?persistent=1", "makestep",
                 "redlockd_acquisitions_total", "redlockd_locks_lost_total",
                 "redlockd_node_up", "redlockd_nodes_up",
                 "REDLOCKD_PASSWORD_FILE", "quarantine"):
        assert must in text, must
    # The guide links the rules file instead of a copy that would drift,
    # and names every alert in it.
    assert "](../docker/prometheus/redlockd-alerts.yaml)" in text
    for block in re.findall(r"```yaml\n(.*?)```", text, re.S):
        assert "alert:" not in block, "a copy of the alert rules"
    for g in alert_rules()["groups"]:
        for r in g["rules"]:
            assert "`%s`" % r["alert"] in text, r["alert"]
    # Every variable the guide names exists.
    known = known_env_names() | {"REDLOCKD_BIN"}
    for name in set(re.findall(r"\bREDLOCKD_[A-Z_]+", text)):
        assert name in known, name
    # Relative links point at files that exist.
    for link in re.findall(r"\]\(((?:\.\./|\./)?[^)#:]+)(?:#[^)]*)?\)",
                           text):
        assert (OPS_DOC.parent / link).resolve().exists(), link
