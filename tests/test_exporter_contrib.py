"""The contrib files of `statstorm exporter` (the Grafana dashboard, the Prometheus alerts, the
systemd unit and its defaults) ask only for what the exporter serves: every metric and label
they name is in the catalogue (statstorm.model.exporter_metrics), every rule and severity in
docs/check.md. A metric renamed in the catalogue fails here before a dashboard goes blank."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from statstorm.model.exporter_metrics import CALLS, METRICS, exposed_names

REPO = Path(__file__).parent.parent
CONTRIB = REPO / "contrib"
DASHBOARD = CONTRIB / "grafana" / "statstorm.json"
ALERTS = CONTRIB / "prometheus" / "alerts.yml"
UNIT = CONTRIB / "systemd" / "statstorm-exporter.service"
DEFAULTS = CONTRIB / "default" / "statstorm-exporter"

ROWS = ("Fleet overview", "Pool", "Mount", "Exporter")
# Prometheus adds instance and job to every scraped series; le is a histogram bucket's bound.
LABELS = {label for m in METRICS for label in m.labels} | {"instance", "job", "le"}

CHECK_DOC = (REPO / "docs" / "check.md").read_text()
RULE_IDS = set(re.findall(r"^### (\S+)$", CHECK_DOC, re.M))
SEVERITIES = set(re.findall(r"^- `(\w+)`:", CHECK_DOC.split("## Severities", 1)[1]
                            .split("\n## ", 1)[0], re.M))
# Label values the exporter can serve, where they are a closed set.
VALUES = {"rule": RULE_IDS, "severity": SEVERITIES, "result": {"ok", "failed"},
          "call": set(CALLS)}

METRIC_NAME = re.compile(r"(?<![A-Za-z0-9_:])statstorm_[a-z0-9_]+")
SELECTOR = re.compile(r"\{([^{}]*)\}")
MATCHER = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"')
GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^()]*)\)")


def metric_problems(expr: str) -> list[str]:
    names = set(METRIC_NAME.findall(expr))
    if not names:
        return [f"names no statstorm metric: {expr!r}"]
    return [f"{n} is not exposed by the exporter (in {expr!r})"
            for n in sorted(names - exposed_names())]


def label_problems(expr: str) -> list[str]:
    problems = []
    for selector in SELECTOR.findall(expr):
        for label, op, value in MATCHER.findall(selector):
            if label not in LABELS:
                problems.append(f"label {label} is not in the catalogue (in {expr!r})")
            elif op in ("=", "!=") and label in VALUES and value not in VALUES[label]:
                problems.append(f"{label}={value!r} is never served (in {expr!r})")
    for group in GROUPING.findall(expr):
        for label in filter(None, (g.strip() for g in group.split(","))):
            if label not in LABELS:
                problems.append(f"label {label} is not in the catalogue (in {expr!r})")
    return problems


# --- the Grafana dashboard -------------------------------------------------------------------

def dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return data


def panels_by_row(dash: dict[str, Any]) -> dict[str | None, list[dict[str, Any]]]:
    """A collapsed row holds its panels; an open one is followed by them."""
    rows: dict[str | None, list[dict[str, Any]]] = {}
    current: str | None = None
    for panel in dash["panels"]:
        if panel["type"] == "row":
            current = panel["title"]
            rows.setdefault(current, []).extend(panel.get("panels", []))
        else:
            rows.setdefault(current, []).append(panel)
    return rows


def all_panels(dash: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for panels in panels_by_row(dash).values() for p in panels]


def panel_exprs(dash: dict[str, Any]) -> list[tuple[str, str]]:
    return [(p["title"], t["expr"]) for p in all_panels(dash) for t in p.get("targets", [])]


def variables(dash: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in dash["templating"]["list"]}


def variable_query(var: dict[str, Any]) -> str:
    query = var["query"]
    return str(query["query"] if isinstance(query, dict) else query)


def test_the_dashboard_is_a_portable_grafana_dashboard() -> None:
    dash = dashboard()
    assert dash["schemaVersion"] >= 36
    # Imported into any Grafana, it asks for a Prometheus data source instead of naming one.
    source = variables(dash)["datasource"]
    assert (source["type"], source["query"]) == ("datasource", "prometheus")
    for panel in all_panels(dash):
        for user in (panel, *panel.get("targets", [])):
            assert user["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, \
                panel["title"]
    nested = [p for row in dash["panels"] for p in row.get("panels", [])]
    ids = [p["id"] for p in dash["panels"] + nested]
    assert len(ids) == len(set(ids)), "panel ids repeat"


def test_the_dashboard_filters_by_instance_and_pool_of_the_pools_up() -> None:
    found = variables(dashboard())
    for name in ("instance", "pool"):
        query = variable_query(found[name])
        match = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", query)
        assert match, query
        assert match.group(2) == name
        assert METRIC_NAME.findall(match.group(1)) == ["statstorm_pool_up"]
        assert label_problems(match.group(1)) == []


def test_the_dashboard_has_panels_in_every_row() -> None:
    rows = panels_by_row(dashboard())
    for title in ROWS:
        assert rows.get(title), f"row {title!r} is missing or empty"


def test_the_dashboard_queries_only_metrics_the_exporter_exposes() -> None:
    exprs = panel_exprs(dashboard())
    assert exprs
    problems = [f"{title}: {p}" for title, expr in exprs for p in metric_problems(expr)]
    assert not problems, "\n".join(problems)


def test_the_dashboard_queries_only_labels_the_exporter_serves() -> None:
    problems = [f"{title}: {p}" for title, expr in panel_exprs(dashboard())
                for p in label_problems(expr)]
    assert not problems, "\n".join(problems)


def test_every_metric_of_the_catalogue_is_on_the_dashboard() -> None:
    shown = {n for _, expr in panel_exprs(dashboard()) for n in METRIC_NAME.findall(expr)}
    missing = [m.name for m in METRICS if not shown & set(m.exposed)]
    assert not missing, f"metrics no panel shows: {missing}"


# --- the Prometheus alerts -------------------------------------------------------------------

def alert_rules() -> list[dict[str, Any]]:
    import yaml  # PyYAML, a dev dependency

    data = yaml.safe_load(ALERTS.read_text())
    groups = {g["name"]: g for g in data["groups"]}
    assert set(groups) == {"statstorm"}
    rules: list[dict[str, Any]] = groups["statstorm"]["rules"]
    return rules


def test_the_alerts_each_have_a_duration_a_severity_and_a_summary() -> None:
    rules = alert_rules()
    names = [r["alert"] for r in rules]
    assert len(names) == len(set(names)), "alert names repeat"
    for name in ("StatstormRealpathCacheFull", "StatstormOpcacheRevalidatingOnNetworkStorage",
                 "StatstormFailedLookupStorm", "StatstormRoundTripsPerRequestRising",
                 "StatstormPoolGone", "StatstormExporterTracerDown"):
        assert name in names
    for rule in rules:
        assert re.fullmatch(r"\d+[smh]", str(rule.get("for", ""))), rule["alert"]
        assert rule["labels"]["severity"] in SEVERITIES, rule["alert"]
        assert rule["annotations"]["summary"].strip(), rule["alert"]
        # The description is where the operator learns what to run.
        assert "statstorm" in rule["annotations"]["description"], rule["alert"]


def test_the_alerts_query_only_metrics_and_labels_the_exporter_exposes() -> None:
    problems = [f"{r['alert']}: {p}" for r in alert_rules()
                for p in metric_problems(r["expr"]) + label_problems(r["expr"])]
    assert not problems, "\n".join(problems)


def test_the_alert_rule_file_passes_promtool() -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not on PATH (the dev setup installs it)")
    run = subprocess.run([promtool, "check", "rules", str(ALERTS)], capture_output=True,
                         text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr


# --- the systemd unit and its defaults -------------------------------------------------------

def unit_settings() -> dict[str, list[str]]:
    settings: dict[str, list[str]] = {}
    for line in UNIT.read_text().splitlines():
        if "=" in line and not line.lstrip().startswith(("#", ";")):
            key, value = line.split("=", 1)
            settings.setdefault(key.strip(), []).append(value.strip())
    return settings


def test_the_systemd_unit_runs_the_exporter_and_stops_it_with_sigterm() -> None:
    unit = unit_settings()
    assert len(unit["ExecStart"]) == 1
    assert "statstorm exporter" in unit["ExecStart"][0]
    assert "$STATSTORM_EXPORTER_ARGS" in unit["ExecStart"][0]
    assert unit["EnvironmentFile"] == ["-/etc/default/statstorm-exporter"]
    assert unit["KillSignal"] == ["SIGTERM"]
    assert unit["WantedBy"] == ["multi-user.target"]


def test_the_systemd_unit_keeps_what_the_tracer_and_the_fastcgi_query_need() -> None:
    unit = unit_settings()
    # Each of these would stop the tracer from attaching, or hide the query script from the
    # pool's workers (PrivateTmp).
    for key in ("PrivateTmp", "ProtectKernelTunables", "ProtectKernelModules",
                "MemoryDenyWriteExecute", "SystemCallFilter", "CapabilityBoundingSet"):
        assert unit.get(key, ["no"])[-1] in ("no", "false"), key
    assert unit.get("User", ["root"]) == ["root"]


def test_the_defaults_file_serves_on_loopback_unless_told_otherwise() -> None:
    active = [line for line in DEFAULTS.read_text().splitlines()
              if line.startswith("STATSTORM_EXPORTER_ARGS=")]
    assert active == ['STATSTORM_EXPORTER_ARGS="--listen 127.0.0.1:9733"']
