"""k8s/monitoring/: the PrometheusRule and the Grafana dashboard parse, match their schemas, and
query only metrics a real hooksvc serves.

Metric names are read from each PromQL expression by tests/support/promql.py (histogram
series by their own `_bucket`/`_sum`/`_count` names, label matchers and functions told
apart) and looked up among the sample names of real scrapes: the web's /metrics (gunicorn,
with a real worker counting steps into the shared multiprocess files) and the watcher's.
`up` is the one name no hooksvc process serves: Prometheus writes it for every scrape
(prometheus/prometheus scrape/scrape.go, scrapeHealthMetricName = "up").
"""

from __future__ import annotations

import copy
import json
import re
import urllib.request
from typing import Any

import jsonschema
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from hooksvc.serving import scrape
from tests.deploy import manifests, monitoring
from tests.hooks.test_metrics import get_metrics
from tests.support import capi, promql, servers
from tests.support import workflows as wf
from tests.support.worker import Worker
from tests.workflows.test_worker import wait_for
from workflows.controllers import watcher
from workflows.models import Run

#: Series Prometheus itself adds to every scrape target.
SYNTHESIZED = frozenset({"up"})
HOOK = "BeforeClusterUpgrade"


def all_queries() -> list[tuple[str, str]]:
    return [
        *monitoring.rule_queries(monitoring.rule()),
        *monitoring.dashboard_queries(monitoring.dashboard()),
    ]


# --- The PromQL reader ------------------------------------------------------------------

NAMES = [
    ("up", {"up"}),
    ('up{job="a", instance=~"b.*"} == 0', {"up"}),
    (
        "max by (hook, template) (hooksvc_run_blocked_seconds) > 3600",
        {"hooksvc_run_blocked_seconds"},
    ),
    ("max(hooksvc_runs) by (template, state)", {"hooksvc_runs"}),
    (
        "histogram_quantile(0.99, sum by (le) (rate(x_seconds_bucket{a='1'}[5m])))",
        {"x_seconds_bucket"},
    ),
    ("rate(a_sum[$__rate_interval]) / rate(a_count[${__rate_interval}])", {"a_sum", "a_count"}),
    ("a * on (instance) group_left (version) b", {"a", "b"}),
    ("a and on() b or ignoring (x) c unless d", {"a", "b", "c", "d"}),
    ("a > bool 1e3 offset 5m", {"a"}),
    ("a @ start() + b offset -1h30m", {"a", "b"}),
    ('{__name__="named_by_label", job="x"}', {"named_by_label"}),
    ('label_replace(a, "dst", "$1 by (x)", "src", "(.*)")', {"a"}),
    ("max_over_time(a[1h:5m]) # trailing comment with b", {"a"}),
    ("time() - max(ns:recorded:rate5m)", {"ns:recorded:rate5m"}),
    ("sum without (pod) (a) / ignoring(le) group_right b", {"a", "b"}),
    ('absent(up{job="w"} == 1) and Inf > NaN', {"up"}),
]


@pytest.mark.parametrize(("expr", "names"), NAMES, ids=[n[0][:40] for n in NAMES])
def test_the_promql_reader_finds_exactly_the_metric_names(expr: str, names: set[str]) -> None:
    assert promql.metric_names(expr) == names


@pytest.mark.parametrize(
    ("expr", "error"),
    [
        ("sum(rate(a[5m])", "unclosed '('"),
        ("a{job='x']", "unbalanced ']'"),
        ('rate(a{template=~"x"}[$window])', "variable $window"),
        ("a ; b", "unexpected ';'"),
        ('{__name__=~"a.*"}', "__name__ must be matched with ="),
    ],
)
def test_the_promql_reader_refuses_what_it_cannot_read(expr: str, error: str) -> None:
    with pytest.raises(ValueError, match=re.escape(error)):
        promql.metric_names(expr)


@pytest.mark.parametrize(
    ("expr", "call"),
    [
        ("max by (a, b) (g)", "max"),
        ("max(g) by (a)", "max"),
        ('sum(max by (t) (g{x="1"}))', "max"),
        ("sum by (a) (g)", "sum"),
        ("rate(g[5m])", "rate"),
        ("g > 1", None),
    ],
)
def test_the_enclosing_aggregation_of_a_selector_is_found(expr: str, call: str | None) -> None:
    [(_, index)] = promql.selectors(expr)
    assert promql.enclosing_call(expr, index) == call


# --- The PrometheusRule -----------------------------------------------------------------


def test_the_rule_matches_the_prometheusrule_schema_and_each_alert_is_routable() -> None:
    doc = monitoring.rule()
    errors = [e.message for e in jsonschema.Draft7Validator(monitoring.SCHEMA).iter_errors(doc)]
    assert not errors
    names = [group["name"] for group in doc["spec"]["groups"]]
    assert len(names) == len(set(names)), "groups are a list keyed by name"
    alerts = [r for g in doc["spec"]["groups"] for r in g["rules"]]
    assert {a["alert"] for a in alerts} >= {
        "HooksvcRunBlockedLong",
        "HooksvcRunsFailed",
        "HooksvcAwaitingApprovalLong",
        "HooksvcWebDown",
        "HooksvcHookErrors",
        "HooksvcBreakGlassInForce",
    }
    for alert in alerts:
        assert alert["labels"]["severity"] in {"critical", "warning", "info"}, alert["alert"]
        assert alert["annotations"]["summary"] and alert["annotations"]["description"]


def _broken(change: Any) -> dict[str, Any]:
    doc = copy.deepcopy(monitoring.rule())
    change(doc["spec"]["groups"][0])
    return doc


@pytest.mark.parametrize(
    "change",
    [
        lambda g: g["rules"][0].update({"expresion": "up"}),
        lambda g: g["rules"][0].update({"for": "5 minutes"}),
        lambda g: g["rules"][0].update({"record": "hooksvc:x"}),
        lambda g: g["rules"][0].pop("expr"),
        lambda g: g.pop("name"),
        lambda g: g.update({"partial_response_strategy": "retry"}),
        lambda g: g["rules"].append({"record": "hooksvc:y", "expr": "up", "for": "1m"}),
    ],
    ids=[
        "unknown-field",
        "bad-duration",
        "alert-and-record",
        "no-expr",
        "group-without-name",
        "bad-strategy",
        "record-with-for",
    ],
)
def test_the_schema_check_refuses_a_broken_rule(change: Any) -> None:
    validator = jsonschema.Draft7Validator(monitoring.SCHEMA)
    assert list(validator.iter_errors(_broken(change)))


@pytest.mark.django_db
def test_fleet_gauges_are_taken_once_over_replicas_with_max_never_summed() -> None:
    """Every web replica reports the same fleet (read from PostgreSQL and Redis at scrape
    time): an expression must take max (or min) of the replicas before anything else."""
    collectors = (scrape.RunsCollector(), scrape.BypassesCollector(), scrape.StallsCollector())
    fleet = {"hooksvc_celery_queue_depth"} | {f.name for c in collectors for f in c.collect()}
    assert {
        "hooksvc_runs",
        "hooksvc_run_blocked_seconds",
        "hooksvc_bypasses_active",
        "hooksvc_steps_stalled",
    } <= fleet
    for where, expr in all_queries():
        for name, index in promql.selectors(expr):
            if name in fleet:
                assert promql.enclosing_call(expr, index) in {"max", "min"}, (where, expr)


def test_the_jobs_the_rule_names_are_the_podmonitors_jobs() -> None:
    """prometheus-operator names a PodMonitor's job "<namespace>/<name>"
    (pkg/prometheus/promcfg.go, generatePodMonitorConfig: "By default, generate a safe job
    name from the PodMonitor")."""
    pods = list(yaml.safe_load_all((monitoring.DIR / "podmonitors.yaml").read_text()))
    jobs = {f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in pods}
    assert len(jobs) == 3
    named = [
        (where, value)
        for where, expr in all_queries()
        for value in re.findall(r'job=~?"([^"]+)"', expr)
    ]
    assert named
    for where, pattern in named:
        assert any(re.fullmatch(pattern, job) for job in jobs), (where, pattern)


# --- The Grafana dashboard --------------------------------------------------------------


def test_the_dashboard_is_a_grafana_dashboard_with_tidy_panels() -> None:
    doc = monitoring.dashboard()
    assert doc["uid"] and doc["title"] and isinstance(doc["schemaVersion"], int)
    variables = {v["name"]: v for v in doc["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    panels = list(monitoring.panels(doc))
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), "panel ids are unique"
    cells: dict[tuple[int, int], str] = {}
    for panel in panels:
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel
        assert panel["targets"], panel["title"]
        refs = [t["refId"] for t in panel["targets"]]
        assert len(refs) == len(set(refs)) and all(t["expr"] for t in panel["targets"])
        pos = panel["gridPos"]
        assert pos["x"] >= 0 and pos["x"] + pos["w"] <= 24, panel["title"]
        for x in range(pos["x"], pos["x"] + pos["w"]):
            for y in range(pos["y"], pos["y"] + pos["h"]):
                assert (x, y) not in cells, f"{panel['title']!r} overlaps {cells[x, y]!r}"
                cells[x, y] = panel["title"]
    titles = " ".join(p["title"].lower() for p in panels)
    for topic in ("held", "state", "latency", "error"):
        assert topic in titles, topic


# --- The kustomization ------------------------------------------------------------------


def test_monitoring_is_its_own_kustomization_and_not_in_the_base(
    rendered: dict[str, list[manifests.Obj]],
) -> None:
    objects = manifests.render(monitoring.DIR)
    kinds = sorted(manifests.id_of(o) for o in objects)
    assert kinds == [
        "ConfigMap/hooksvc-dashboard",
        "PodMonitor/hooksvc-watcher",
        "PodMonitor/hooksvc-web",
        "PodMonitor/hooksvc-worker",
        "PrometheusRule/hooksvc",
    ]
    config_map = manifests.find(objects, "ConfigMap", "hooksvc-dashboard")
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(config_map["data"]["hooksvc-dashboard.json"]) == monitoring.dashboard()
    for name in manifests.TARGETS:
        base = rendered[name]
        assert not [o for o in base if o["apiVersion"].startswith("monitoring.coreos.com")], name
    # Each PodMonitor selects pods of the base that have the port it scrapes.
    pods = {
        manifests.id_of(w): manifests.pod_spec(w) for w in manifests.workloads(rendered["base"])
    }
    labels = {
        manifests.id_of(w): w["spec"]["template"]["metadata"]["labels"]
        for w in manifests.workloads(rendered["base"])
    }
    certificate = manifests.find(rendered["base"], "Certificate", "hooksvc-webhook")
    for monitor in (o for o in objects if o["kind"] == "PodMonitor"):
        wanted = monitor["spec"]["selector"]["matchLabels"]
        [workload] = [w for w, have in labels.items() if wanted.items() <= have.items()]
        ports = {p["name"] for c in pods[workload]["containers"] for p in c.get("ports", [])}
        for endpoint in monitor["spec"]["podMetricsEndpoints"]:
            assert endpoint["port"] in ports, (monitor["metadata"]["name"], ports)
            ca = endpoint.get("tlsConfig", {}).get("ca", {}).get("secret", {})
            if ca:
                assert ca["name"] == certificate["spec"]["secretName"]
                server_name = endpoint["tlsConfig"]["serverName"]
                assert server_name in certificate["spec"]["dnsNames"]


# --- Against real scrapes ---------------------------------------------------------------


class _Turning:
    def problem(self) -> str:
        return ""


def _watcher_sample_names() -> set[str]:
    port = servers.free_port()
    server = watcher.serve(_Turning(), port, host="127.0.0.1")
    try:
        url = f"http://127.0.0.1:{port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as response:
            text = response.read().decode()
    finally:
        server.shutdown()
        server.server_close()
    return {s.name for f in text_string_to_metric_families(text) for s in f.samples}


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_every_metric_the_rule_and_the_dashboard_use_is_on_a_real_scrape(
    hook_server: servers.HookServer, worker: Worker
) -> None:
    # A run that holds (an approval), and one whose only step fails for good.
    wf.template(
        "mon-gate",
        steps=[{"name": "approve", "type": "approval"}],
        clusterSelector={"namespaces": ["mon-gate"]},
    )
    dead = f"http://127.0.0.1:{servers.free_port()}/"
    wf.template(
        "mon-broken",
        steps=[
            {
                "name": "notify",
                "type": "http",
                "with": {"url": dead},
                "retries": 0,
                "retryForSeconds": 0,
            }
        ],
        clusterSelector={"namespaces": ["mon-broken"]},
    )
    for name in ("mon-gate", "mon-broken"):
        cluster = capi.cluster_v1beta2(name=name, namespace=name, uid=f"uid-{name}")
        status, body = hook_server.post(capi.hook_path(HOOK), capi.hook_request(HOOK, cluster))
        assert status == 200 and body["retryAfterSeconds"] > 0, body
    wait_for(
        lambda: Run.objects.filter(template_name="mon-broken", state="failed").exists(),
        what="the broken run failing",
    )
    served = {name for name, _ in get_metrics(hook_server)} | _watcher_sample_names()

    used = [(where, name) for where, expr in all_queries() for name in promql.metric_names(expr)]
    used += list(monitoring.variable_metrics(monitoring.dashboard()))
    missing = sorted({(w, n) for w, n in used if n not in served | SYNTHESIZED})
    assert not missing, f"not on /metrics: {missing}; served: {sorted(served)}"
    rule_names = {n for w, n in used if w.startswith("rule")}
    panel_names = {n for w, n in used if w.startswith("panel")}
    for name in ("hooksvc_run_blocked_seconds", "hooksvc_runs", "hooksvc_hook_calls_total"):
        assert name in rule_names and name in panel_names, name
    assert "hooksvc_hook_latency_seconds_bucket" in panel_names
