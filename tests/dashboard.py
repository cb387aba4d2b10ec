"""The Grafana dashboard in deploy/grafana and the metric names its queries use."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

DASHBOARD = Path(__file__).resolve().parents[1] / "deploy" / "grafana" / "lilac-serve.json"
_METRIC = re.compile(r"\b(vllm:[a-z][a-z0-9_:]*|lilac_[a-z0-9_]+)")
_SUFFIXES = ("", "_total", "_bucket", "_count", "_sum", "_created")


def load() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    found = []
    for panel in dashboard["panels"]:
        found.append(panel)
        found.extend(panel.get("panels", []))  # a collapsed row holds its panels
    return found


def metric_names(dashboard: dict[str, Any]) -> set[str]:
    names = set()
    for panel in panels(dashboard):
        for target in panel.get("targets", []):
            names.update(_METRIC.findall(target["expr"]))
    return names


def exported_names(metrics_text: str) -> set[str]:
    """Every series name a scrape exports, also for families without samples yet (a
    labelled counter before its first label: its HELP and TYPE lines)."""
    names = set()
    for family in text_string_to_metric_families(metrics_text):
        names.update(family.name + suffix for suffix in _SUFFIXES)
        names.update(sample.name for sample in family.samples)
    return names
