"""The operator kit in deploy/observability: every PromQL expression of the Grafana dashboard and of the
alert rules names only metrics Baton's /metrics exports (or Prometheus' own `up`). promtool checks the
rules' syntax and runs their unit tests in scripts/test.sh."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from baton.runtime import metrics_for
from tests.conftest import open_store

KIT = Path(__file__).resolve().parents[2] / "deploy" / "observability"
DASHBOARD = KIT / "baton-dashboard.json"
ALERTS = KIT / "baton-alerts.yml"

# What Prometheus adds to every scrape; the rules may use it.
PROMETHEUS_OWN = {"up"}
# Samples a metric family of each type exports (prometheus_client's text format).
SUFFIXES = {
    "counter": ("_total", "_created"),
    "gauge": ("",),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "summary": ("", "_sum", "_count", "_created"),
}
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless", "offset"}


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    """The sample names of every metric family Baton's registry collects (read from a real store)."""
    store = open_store(f"sqlite:///{tmp_path_factory.mktemp('metrics') / 'baton.db'}")
    try:
        families = list(metrics_for(store).registry.collect())
    finally:
        store.dispose()
    return {family.name + suffix for family in families for suffix in SUFFIXES[family.type]}


def metric_names(expression: str) -> set[str]:
    """The metric names a PromQL expression selects: identifiers that are not functions, keywords,
    label names (in `by (...)` and friends, matchers `{...}`), strings or durations."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expression)  # strings (label_replace's arguments)
    text = re.sub(r"\{[^}]*\}", "", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", "", text)  # ranges: [5m], [$__rate_interval]
    text = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", text)  # label lists
    text = re.sub(r"\boffset\s+\S+", "", text)
    text = re.sub(r"\$\w+", "", text)  # dashboard variables
    found = set()
    for match in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", text):
        name, after = match.group(), text[match.end() :].lstrip()
        if after.startswith("(") or name in KEYWORDS or re.fullmatch(r"\d*e\d+|inf|nan", name, re.IGNORECASE):
            continue
        if match.start() > 0 and (text[match.start() - 1].isdigit() or text[match.start() - 1] == "."):
            continue  # the exponent or unit of a number
        found.add(name)
    return found


def dashboard_expressions(dashboard: dict[str, Any]) -> Iterator[tuple[str, str]]:
    def panels(items: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        for panel in items:
            yield panel
            yield from panels(panel.get("panels", []))

    for panel in panels(dashboard["panels"]):
        for target in panel.get("targets", []):
            yield f"panel '{panel['title']}'", target["expr"]
    for variable in dashboard["templating"]["list"]:
        query = variable.get("query")
        if isinstance(query, dict):
            # label_values(metric, label): the metric is what matters.
            inner = re.fullmatch(r"label_values\((.+),\s*\w+\)", query["query"])
            yield f"variable '{variable['name']}'", inner.group(1) if inner else query["query"]


def alert_expressions(rules: dict[str, Any]) -> Iterator[tuple[str, str]]:
    for group in rules["groups"]:
        for rule in group["rules"]:
            yield f"rule {rule.get('alert') or rule.get('record')}", rule["expr"]


def test_the_extractor_finds_metrics_and_skips_the_rest() -> None:
    expression = (
        'sum by (type) (label_replace(max by (queue) (baton_queue_depth{job=~"$job"}), "type", "$1", "queue", '
        '"(boefje)-.*")) > 1e3 unless on (queue) increase(baton_pops_total[5m] offset 1h) and bool up'
    )
    assert metric_names(expression) == {"baton_queue_depth", "baton_pops_total", "up"}


def test_exported_names_include_each_kind_of_family(exported: set[str]) -> None:
    assert {"baton_pops_total", "baton_pop_latency_seconds_bucket", "baton_queue_depth"} <= exported
    assert {"baton_leader", "baton_tasks_recovered_total", "baton_dwell_seconds_count"} <= exported


@pytest.mark.parametrize(
    ("path", "expressions"),
    [
        (DASHBOARD, lambda: dashboard_expressions(json.loads(DASHBOARD.read_text()))),
        (ALERTS, lambda: alert_expressions(yaml.safe_load(ALERTS.read_text()))),
    ],
    ids=["dashboard", "alerts"],
)
def test_every_expression_names_only_metrics_baton_exports(path: Path, expressions: Any, exported: set[str]) -> None:
    checked = 0
    for where, expression in expressions():
        names = metric_names(expression)
        assert names, f"{path.name}, {where}: no metric found in {expression!r}"
        unknown = names - exported - PROMETHEUS_OWN
        assert not unknown, (
            f"{path.name}, {where}: {sorted(unknown)} not exported by Baton "
            f"(src/baton/service/metrics.py exports {sorted(exported)})"
        )
        checked += 1
    assert checked >= 5


def test_dashboard_panels_are_placed_once_and_use_the_datasource_variable() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        position = panel["gridPos"]
        assert position["x"] + position["w"] <= 24, panel["title"]
        if panel.get("targets"):
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
    assert [variable["name"] for variable in dashboard["templating"]["list"]] == ["datasource", "job"]
