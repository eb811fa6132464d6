"""k8s/monitoring/ for the tests: the PrometheusRule, the Grafana dashboard, their queries, and
the PrometheusRule's schema.

The schema is written from prometheus-operator's Go types, which its CRD is generated from
(prometheus-operator/prometheus-operator pkg/apis/monitoring/v1/prometheusrule_types.go:
PrometheusRuleSpec.groups, a list keyed by `name`; RuleGroup name (MinLength 1), interval,
rules, partial_response_strategy (pattern `^(?i)(abort|warn)?$`), limit; Rule record, alert,
expr (IntOrString), for, keep_firing_for, labels, annotations, "Only one of `record` and
`alert` must be set", annotations "Only valid for alerting rules"; types.go: Duration and
NonEmptyDuration match Prometheus' model.ParseDuration units y, w, d, h, m, s, ms). It is
strict (no other fields), so a rule that passes it is accepted by operators older than the
fields added since (group `labels`, `query_offset`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from tests.deploy import manifests

DIR = manifests.K8S / "monitoring"
RULE_FILE = DIR / "prometheusrule.yaml"
DASHBOARD_FILE = DIR / "hooksvc-dashboard.json"

_DURATION = (
    r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"
)
_LABELS = {"type": "object", "additionalProperties": {"type": "string"}}
_RULE: dict[str, Any] = {
    "type": "object",
    "required": ["expr"],
    "additionalProperties": False,
    "properties": {
        "record": {"type": "string", "minLength": 1},
        "alert": {"type": "string", "minLength": 1},
        "expr": {"anyOf": [{"type": "string", "minLength": 1}, {"type": "integer"}]},
        "for": {"type": "string", "pattern": _DURATION},
        "keep_firing_for": {"type": "string", "pattern": _DURATION, "minLength": 1},
        "labels": _LABELS,
        "annotations": _LABELS,
    },
    "oneOf": [
        {"required": ["alert"], "not": {"required": ["record"]}},
        {
            "required": ["record"],
            "not": {
                "anyOf": [
                    {"required": ["alert"]},
                    {"required": ["annotations"]},
                    {"required": ["for"]},
                    {"required": ["keep_firing_for"]},
                ]
            },
        },
    ],
}
_GROUP: dict[str, Any] = {
    "type": "object",
    "required": ["name"],
    "additionalProperties": False,
    "properties": {
        "name": {"type": "string", "minLength": 1},
        "interval": {"type": "string", "pattern": _DURATION},
        "rules": {"type": "array", "items": _RULE},
        # The CRD's `(?i)` flag, spelled out: Python's re refuses it after `^`.
        "partial_response_strategy": {
            "type": "string",
            "pattern": "^([Aa][Bb][Oo][Rr][Tt]|[Ww][Aa][Rr][Nn])?$",
        },
        "limit": {"type": "integer"},
    },
}
SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "PrometheusRule"},
        "metadata": {"type": "object", "required": ["name"]},
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "properties": {"groups": {"type": "array", "items": _GROUP}},
        },
    },
}


def rule() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(RULE_FILE.read_text())
    return doc


def dashboard(path: Path = DASHBOARD_FILE) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(path.read_text())
    return doc


def rule_queries(doc: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(where, PromQL) for each rule of the PrometheusRule."""
    for group in doc["spec"]["groups"]:
        for item in group.get("rules", []):
            yield f"rule {item.get('alert') or item.get('record')}", str(item["expr"])


def panels(doc: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, those inside collapsed rows included."""
    for panel in doc.get("panels", []):
        yield panel
        yield from panel.get("panels", [])


def dashboard_queries(doc: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(where, PromQL) for each panel target of the dashboard."""
    for panel in panels(doc):
        for target in panel.get("targets", []):
            yield f"panel {panel['title']!r} {target['refId']}", target["expr"]


def variable_metrics(doc: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(where, metric) for each `label_values(metric, label)` query of a template variable."""
    for variable in doc.get("templating", {}).get("list", []):
        if variable.get("type") != "query":
            continue
        query = variable["query"]
        text = query["query"] if isinstance(query, dict) else query
        inner = text.strip().removeprefix("label_values(").removesuffix(")")
        if inner == text.strip() or "," not in inner:
            raise ValueError(f"variable {variable['name']}: expected label_values(metric, label)")
        yield f"variable {variable['name']}", inner.split(",")[0].strip()
