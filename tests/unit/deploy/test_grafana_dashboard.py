"""deploy/grafana/lilac-serve.json follows Grafana's dashboard JSON model, and every
series it queries is one lilac-serve exports (the real-engine test checks the `vllm:`
names against a real scrape; here the `lilac_` ones against the app's /metrics)."""

from __future__ import annotations

from engine.scripted import ScriptedEngine
from tests import dashboard
from tests.client import app_client

PANEL_TYPES = {"row", "timeseries", "stat", "state-timeline", "gauge", "table", "bargauge"}


def test_the_dashboard_has_grafanas_structure() -> None:
    board = dashboard.load()
    for key in ("title", "uid", "schemaVersion", "panels", "templating", "time"):
        assert key in board, key
    assert isinstance(board["schemaVersion"], int) and board["schemaVersion"] >= 36
    ids = [panel["id"] for panel in dashboard.panels(board)]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    datasource_vars = {v["name"] for v in board["templating"]["list"] if v["type"] == "datasource"}
    for panel in dashboard.panels(board):
        assert panel["type"] in PANEL_TYPES, panel["type"]
        grid = panel["gridPos"]
        assert all(isinstance(grid[k], int) for k in ("h", "w", "x", "y"))
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24, panel["title"]
        if panel["type"] == "row":
            continue
        assert panel["title"] and panel["targets"], panel
        assert panel["datasource"]["type"] == "prometheus"
        assert panel["datasource"]["uid"].strip("${}") in datasource_vars
        ref_ids = [target["refId"] for target in panel["targets"]]
        assert len(ref_ids) == len(set(ref_ids)), panel["title"]
        for target in panel["targets"]:
            assert dashboard.metric_names({"panels": [{"targets": [target]}]}), target["expr"]


def test_the_dashboard_covers_the_series_operators_need() -> None:
    names = dashboard.metric_names(dashboard.load())
    for needed in (
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:time_to_first_token_seconds_bucket",
        "vllm:inter_token_latency_seconds_bucket",
        "vllm:e2e_request_latency_seconds_bucket",
        "vllm:request_queue_time_seconds_bucket",
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
        "vllm:request_success_total",
        "vllm:prefix_cache_hits_total",
        "lilac_admission_state",
        "lilac_owner_gpu_utilization_percent",
        "lilac_admission_yield_seconds_bucket",
        "lilac_owner_interference_seconds_total",
        "lilac_admission_rejections_total",
        "lilac_http_requests_total",
        "lilac_key_requests_total",
    ):
        assert needed in names, needed


async def test_every_lilac_series_the_dashboard_queries_is_exported() -> None:
    async with app_client(ScriptedEngine()) as http:
        await http.post(
            "/v1/chat/completions",
            json={"model": "scripted", "messages": [{"role": "user", "content": "hi"}]},
        )
        exported = dashboard.exported_names((await http.get("/metrics")).text)
    wanted = {n for n in dashboard.metric_names(dashboard.load()) if n.startswith("lilac_")}
    assert wanted - exported == set()


def test_a_model_selector_filters_every_vllm_series() -> None:
    board = dashboard.load()
    [model] = [v for v in board["templating"]["list"] if v["name"] == "model_name"]
    assert model["type"] == "query" and model["includeAll"] and model["multi"]
    assert "label_values(vllm:" in model["definition"] and "model_name)" in model["definition"]
    for panel in dashboard.panels(board):
        for target in panel.get("targets", []):
            expr = target["expr"]
            series = expr.count("vllm:")
            assert expr.count('{model_name=~"$model_name"') == series, expr
