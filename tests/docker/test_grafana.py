"""docker/grafana: the dashboard shows what an operator needs, with metrics
the daemon really exports, and compose provisions it beside Prometheus.

    /usr/bin/python3 -m pytest tests/docker/test_grafana.py -q
"""

import json

from test_docker import (COMPOSE, DOCKER, exported_metrics, load_yaml,
                         metric_names_in)
from test_docker import nodes, sidecar  # noqa: F401 (fixtures)

GRAFANA = DOCKER / "grafana"
DASHBOARD = GRAFANA / "dashboards" / "redlockd.json"


def dashboard():
    return json.loads(DASHBOARD.read_text())


def exprs(d):
    return [t["expr"] for p in d["panels"] for t in p.get("targets", [])]


def test_dashboard_covers_what_to_watch():
    d = dashboard()
    assert d["uid"] == "redlockd"
    by_metric = {}
    for p in d["panels"]:
        for t in p.get("targets", []):
            for m in metric_names_in(t["expr"]):
                by_metric.setdefault(m, set()).add(p["title"])
    for m in ("redlockd_acquisitions_total", "redlockd_acquire_duration_seconds",
              "redlockd_waiters", "redlockd_locks_held",
              "redlockd_renewals_total", "redlockd_locks_lost_total",
              "redlockd_node_up", "redlockd_node_quarantined",
              "redlockd_build_info"):
        assert m in by_metric, "no panel graphs %s" % m
    assert any("by (result)" in e and "acquisitions_total" in e
               for e in exprs(d))
    # Every query goes through the datasource variable and the instance
    # filter, so one dashboard serves any Prometheus and any sidecar.
    names = [v["name"] for v in d["templating"]["list"]]
    assert names == ["datasource", "instance"], names
    for p in d["panels"]:
        if p["type"] == "row":
            continue
        assert p["datasource"]["uid"] == "${datasource}", p["title"]
        for t in p["targets"]:
            assert 'instance=~"$instance"' in t["expr"], t["expr"]
    ids = [p["id"] for p in d["panels"]]
    assert len(ids) == len(set(ids))


def test_dashboard_metrics_are_exported(sidecar):  # noqa: F811
    exported, _ = exported_metrics(sidecar)
    used = set()
    for e in exprs(dashboard()):
        used |= metric_names_in(e)
    assert used <= exported, used - exported


def test_compose_provisions_grafana_beside_prometheus():
    c = load_yaml(COMPOSE)
    g = c["services"]["grafana"]
    assert g["profiles"] == c["services"]["prometheus"]["profiles"]
    assert "prometheus" in g["depends_on"]
    assert g["networks"] == c["services"]["prometheus"]["networks"]
    mounts = {}
    for v in g["volumes"]:
        src, dst = v.split(":")[:2]
        mounts[dst] = (COMPOSE.parent / src).resolve()
        assert mounts[dst].exists(), v
    assert all(p.startswith("127.0.0.1:") for p in g["ports"])
    prov = mounts["/etc/grafana/provisioning"]
    ds = load_yaml(prov / "datasources" / "prometheus.yaml")
    [src] = ds["datasources"]
    assert src["type"] == "prometheus"
    assert src["url"] == "http://prometheus:9090"
    dash = load_yaml(prov / "dashboards" / "redlockd.yaml")
    path = dash["providers"][0]["options"]["path"]
    assert mounts[path] == DASHBOARD.parent.resolve()
