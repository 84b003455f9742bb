"""docker/k8s: validated against the Kubernetes schemas, and consistent.

    /usr/bin/python3 -m pytest tests/docker/test_k8s.py -q

- Every manifest (docker/k8s, docker/k8s/monitoring) validates against the
  JSON schemas of the Kubernetes API and the Prometheus Operator CRDs, as
  shipped by the npm packages kubernetes-models (offline; the validator is
  tests/docker/k8s-validate). The schemas check types, required fields and
  formats; they do not refuse unknown fields.
- The sidecar's memory limit covers what its --max-locks, --max-connections
  and --max-waiters allow, at the per-item costs measured in BENCHMARKS.md.
- Five Redis nodes, one StatefulSet each, kept apart, persistent, under a
  PodDisruptionBudget; the ConfigMap names exactly them.
- The NetworkPolicies: the bot pod reaches only the nodes and DNS; only
  the monitoring namespace reaches the metrics port.
- The alert rules' job="redlockd" holds under both scrape setups, the
  PrometheusRule holds the same rules as the alerts file, and the slow-node
  alert fires at half the daemon's default node timeout.

Needs node and npm for the schema validation (skipped without them, failed
under CI=true) and python3-yaml.
"""

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from test_docker import (ALERTS, BIN, CI, K8S, REPO, k8s_docs, load_yaml,
                         load_yaml_all, need)

VALIDATOR = Path(__file__).resolve().parent / "k8s-validate"
MONITORING = K8S / "monitoring"
BENCH = REPO / "BENCHMARKS.md"
NODE_LETTERS = "abcde"
HEADROOM = 1.5           # limit >= HEADROOM x the computed need
WAITER_BYTES = 1024      # not measured: an assumption, stated in the docs
IDLE_BYTES = 3 * 1024 * 1024


def manifests():
    files = sorted(K8S.glob("*.yaml")) + sorted(MONITORING.glob("*.yaml"))
    out = []
    for f in files:
        docs = load_yaml_all(f)
        if docs and all("apiVersion" in d and "kind" in d and
                        d["kind"] != "Kustomization" for d in docs):
            out.append(f)
    return out


@pytest.fixture(scope="module")
def validator():
    node = shutil.which("node")
    npm = shutil.which("npm")
    need(node and npm, "node and npm (apt-get install -y nodejs npm)")
    if not (VALIDATOR / "node_modules" / "kubernetes-models").is_dir():
        p = subprocess.run([npm, "ci", "--no-audit", "--no-fund"],
                           cwd=str(VALIDATOR), capture_output=True,
                           text=True, timeout=300)
        need(p.returncode == 0, "npm ci in %s: %s" % (VALIDATOR,
                                                       p.stderr[-500:]))
    return [node, str(VALIDATOR / "validate.mjs")]


def test_every_manifest_validates_against_the_schemas(validator):
    files = manifests()
    kinds = {d["kind"] for f in files for d in load_yaml_all(f)}
    assert {"Deployment", "StatefulSet", "Service", "ConfigMap", "Secret",
            "PodDisruptionBudget", "NetworkPolicy", "ServiceMonitor",
            "PrometheusRule"} <= kinds, kinds
    p = subprocess.run(validator + [str(f) for f in files],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    n_docs = sum(len(load_yaml_all(f)) for f in files)
    assert p.stdout.count("\nok ") + p.stdout.startswith("ok ") == n_docs


def test_the_validator_refuses_what_is_wrong(validator, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\n"
        "spec:\n  replicas: two\n  selector: {matchLabels: {a: b}}\n"
        "  template:\n    spec:\n      containers: [{name: c, image: i}]\n"
        "---\napiVersion: v1\nkind: Pod\nmetadata: {name: y}\nspec:\n"
        "  containers: [{name: c, image: i, resources: {limits: "
        "{memory: lots}}}]\n"
        "---\napiVersion: example.com/v1\nkind: Gadget\nmetadata: {name: z}\n")
    p = subprocess.run(validator + [str(bad)], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 1, p.stdout
    assert p.stdout.count("invalid ") == 3, p.stdout
    assert "replicas" in p.stdout and "memory" in p.stdout, p.stdout


# ---- sizing -------------------------------------------------------------

def bench_costs():
    """(bytes per held lock, bytes per idle connection) from BENCHMARKS.md."""
    text = BENCH.read_text()
    m = re.search(r"^RESULT mode=renew .*\bbytes_per_lock=(\d+)", text, re.M)
    assert m, "no renew RESULT line with bytes_per_lock in BENCHMARKS.md"
    per_lock = int(m.group(1))
    per_conn = [int(b.replace(",", "")) for b in re.findall(
        r"^\| \d+ \| [\d,]+ → [\d,]+ \| ([\d,]+) \|", text, re.M)]
    assert per_conn, "no idle-connection table in BENCHMARKS.md"
    return per_lock, max(per_conn)


def quantity_bytes(q):
    units = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30}
    m = re.fullmatch(r"(\d+)(Ki|Mi|Gi)", str(q))
    assert m, "memory quantity %r: use Ki, Mi or Gi" % q
    return int(m.group(1)) * units[m.group(2)]


def daemon_limits(extra_args):
    """--max-locks/--max-connections/--max-waiters, defaults from --help."""
    defaults = {"--max-locks": 1000000, "--max-connections": 10240,
                "--max-waiters": 100000}
    if BIN.is_file():
        helptext = subprocess.run([str(BIN), "--help"], capture_output=True,
                                  text=True, timeout=10).stdout
        for flag in defaults:
            m = re.search(re.escape(flag) + r" N.*?default (\d+)\)", helptext,
                          re.S)
            assert m, flag
            defaults[flag] = int(m.group(1))
    args = extra_args.split()
    out = dict(defaults)
    for flag in defaults:
        if flag in args:
            out[flag] = int(args[args.index(flag) + 1])
    return out


def memory_need(limits, per_lock, per_conn):
    return (IDLE_BYTES + limits["--max-locks"] * per_lock +
            limits["--max-connections"] * per_conn +
            limits["--max-waiters"] * WAITER_BYTES)


def sidecar_resources():
    dep = [d for f, d in k8s_docs()["Deployment"]][0]
    spec = dep["spec"]["template"]["spec"]
    c = [c for c in spec.get("initContainers", []) + spec["containers"]
         if c["name"] == "redlockd"][0]
    return c["resources"]


def test_memory_limit_covers_what_the_flags_allow():
    per_lock, per_conn = bench_costs()
    cm = [d for f, d in k8s_docs()["ConfigMap"] if f == "configmap.yaml"][0]
    limits = daemon_limits(cm["data"].get("REDLOCKD_EXTRA_ARGS", ""))
    res = sidecar_resources()
    limit = quantity_bytes(res["limits"]["memory"])
    need_b = memory_need(limits, per_lock, per_conn)
    assert need_b * HEADROOM <= limit, (
        "memory limit %s < %.1f x %d MB that %r allow at %d bytes per lock "
        "and %d per connection" % (res["limits"]["memory"], HEADROOM,
                                   need_b >> 20, limits, per_lock, per_conn))
    # The daemon's defaults would not fit: the flags are what keep it safe
    # (and this check can fail).
    assert memory_need(daemon_limits(""), per_lock, per_conn) > limit
    # The comment states the measured cost it was sized with.
    text = (K8S / "deployment.yaml").read_text()
    assert "%d bytes" % per_lock in text, "deployment.yaml's sizing comment"


# ---- the five nodes -----------------------------------------------------

def node_docs():
    out = {}
    for k in NODE_LETTERS:
        docs = load_yaml_all(K8S / ("redis-node-%s.yaml" % k))
        out[k] = {d["kind"]: d for d in docs}
    return out


def test_five_independent_persistent_nodes():
    nodes = node_docs()
    texts = {k: (K8S / ("redis-node-%s.yaml" % k)).read_text()
             for k in NODE_LETTERS}
    for k in NODE_LETTERS:
        # The same manifest but for the node's name.
        assert texts[k].replace("redlock-%s" % k, "redlock-X").replace(
            "node %s " % k.upper(), "node X ") == texts["a"].replace(
            "redlock-a", "redlock-X").replace("node A ", "node X ")
        sts, svc = nodes[k]["StatefulSet"], nodes[k]["Service"]
        assert sts["metadata"]["name"] == svc["metadata"]["name"] == \
            "redlock-%s" % k
        assert sts["spec"]["replicas"] == 1
        aff = sts["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
        req = aff["requiredDuringSchedulingIgnoredDuringExecution"]
        pref = aff["preferredDuringSchedulingIgnoredDuringExecution"]
        assert [t["topologyKey"] for t in req] == ["kubernetes.io/hostname"]
        assert [t["podAffinityTerm"]["topologyKey"] for t in pref] == \
            ["topology.kubernetes.io/zone"]
        assert sts["spec"]["volumeClaimTemplates"][0]["metadata"]["name"] \
            == "data"
    common = {d["kind"]: d for d in load_yaml_all(K8S / "redis-common.yaml")}
    conf = common["ConfigMap"]["data"]["redis.conf"]
    for line in ("appendonly yes", "appendfsync always",
                 "maxmemory-policy noeviction"):
        assert line in conf.splitlines(), line
    pdb = common["PodDisruptionBudget"]["spec"]
    assert pdb["maxUnavailable"] == 1
    assert pdb["selector"]["matchLabels"] == {
        "app.kubernetes.io/name": "redlock-node"}
    # The sidecar locks on exactly these five, as persistent nodes.
    cm = [d for f, d in k8s_docs()["ConfigMap"] if f == "configmap.yaml"][0]
    uris = cm["data"]["REDLOCKD_NODES"].split(",")
    assert uris == ["redis://redlock-%s:6379?persistent=1" % k
                    for k in NODE_LETTERS], uris
    kust = load_yaml(K8S / "kustomization.yaml")
    for k in NODE_LETTERS:
        assert "redis-node-%s.yaml" % k in kust["resources"]
    for f in ("redis-common.yaml", "networkpolicy.yaml"):
        assert f in kust["resources"]


# ---- network policies ---------------------------------------------------

def test_bot_pod_reaches_only_the_nodes_and_dns():
    nps = {d["metadata"]["name"]: d for f, d in k8s_docs()["NetworkPolicy"]}
    bot = nps["telegram-bot"]["spec"]
    dep = [d for f, d in k8s_docs()["Deployment"]][0]
    pod_labels = dep["spec"]["template"]["metadata"]["labels"]
    assert all(pod_labels.get(k) == v
               for k, v in bot["podSelector"]["matchLabels"].items())
    assert sorted(bot["policyTypes"]) == ["Egress", "Ingress"]
    # In: only the monitoring namespace, only the metrics port.
    [rule] = bot["ingress"]
    assert rule["from"] == [{"namespaceSelector": {"matchLabels": {
        "kubernetes.io/metadata.name": "monitoring"}}}]
    assert rule["ports"] == [{"protocol": "TCP", "port": 9477}]
    # Out: the nodes on 6379, DNS on 53.
    egress = bot["egress"]
    assert len(egress) == 2, egress
    to_nodes, to_dns = egress
    assert to_nodes["to"] == [{"podSelector": {"matchLabels": {
        "app.kubernetes.io/name": "redlock-node"}}}]
    assert to_nodes["ports"] == [{"protocol": "TCP", "port": 6379}]
    assert {p["port"] for p in to_dns["ports"]} == {53}
    assert to_dns["to"][0]["podSelector"]["matchLabels"] == {
        "k8s-app": "kube-dns"}
    # The nodes let in exactly the pods that carry the client label.
    node_np = nps["redlock-node"]["spec"]
    sel = node_np["ingress"][0]["from"][0]["podSelector"]["matchLabels"]
    assert all(pod_labels.get(k) == v for k, v in sel.items()), sel
    assert node_np["egress"] == []


# ---- monitoring ---------------------------------------------------------

def test_down_alert_job_holds_under_both_scrape_setups():
    rules = load_yaml(ALERTS)
    down = [r for g in rules["groups"] for r in g["rules"]
            if r.get("alert") == "RedlockdDown"][0]
    m = re.search(r'job="([^"]+)"', down["expr"])
    job = m.group(1)
    # Plain Prometheus with the pod annotations.
    scrape = load_yaml(MONITORING / "prometheus-scrape.yaml")
    assert [j["job_name"] for j in scrape["scrape_configs"]] == [job]
    # Prometheus Operator: the job label comes from the Service's label.
    sm = load_yaml(MONITORING / "servicemonitor.yaml")
    svc = [d for f, d in k8s_docs()["Service"] if f == "service.yaml"][0]
    assert svc["metadata"]["labels"][sm["spec"]["jobLabel"]] == job
    assert all(svc["metadata"]["labels"].get(k) == v for k, v in
               sm["spec"]["selector"]["matchLabels"].items())
    assert sm["spec"]["endpoints"][0]["port"] == \
        svc["spec"]["ports"][0]["name"]
    # The compose demo's Prometheus too.
    prom = load_yaml(ALERTS.parent / "prometheus.yml")
    assert [j["job_name"] for j in prom["scrape_configs"]] == [job]


def test_prometheusrule_holds_the_alert_rules():
    pr = load_yaml(MONITORING / "prometheusrule.yaml")
    assert pr["spec"] == load_yaml(ALERTS), \
        "regenerate docker/k8s/monitoring/prometheusrule.yaml from the alerts"


def test_slow_node_alert_at_half_the_default_node_timeout():
    need(BIN.is_file(), "the daemon at %s" % BIN)
    helptext = subprocess.run([str(BIN), "--help"], capture_output=True,
                              text=True, timeout=10).stdout
    m = re.search(r"--node-timeout-ms N.*?default (\d+)\)", helptext, re.S)
    default_s = int(m.group(1)) / 1000.0
    rule = [r for g in load_yaml(ALERTS)["groups"] for r in g["rules"]
            if r.get("alert") == "RedlockdNodeSlow"][0]
    threshold = float(re.search(r">\s*([\d.]+)\s*$", rule["expr"]).group(1))
    assert threshold == default_s / 2, (threshold, default_s)
    assert "%d ms" % int(default_s * 1000) in ALERTS.read_text()
