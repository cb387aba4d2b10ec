"""/metrics over the real engine: vLLM's own series (names, labels and buckets of `vllm
serve`) move with a request, beside the `lilac_` ones; every series the Grafana
dashboard queries is in the scrape.

vLLM keeps its series in prometheus_client's global registry and unregisters them each
time an engine is built: in a process that builds several engines (the family tests
build their own), only the last one's series are scraped. This module is named to run
before the family tests, while the session engine is the last one built; a server runs
one engine per process, so it always scrapes its own."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from engine.checkpoint import DEFAULT_MODEL_NAME
from tests import dashboard
from tests.client import AppClient


def _labelled(text: str, name: str, labels: dict[str, str]) -> bool:
    return any(
        sample.name == name and sample.labels == labels
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    )


CHAT = {
    "model": DEFAULT_MODEL_NAME,
    "messages": [{"role": "user", "content": "Name a colour."}],
    "max_tokens": 4,
    "temperature": 0,
}


def _values(text: str) -> dict[str, float]:
    summed: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            summed[sample.name] = summed.get(sample.name, 0.0) + sample.value
    return summed


async def test_vllm_series_move_and_the_dashboard_queries_exist(real_client: AppClient) -> None:
    before = _values((await real_client.get("/metrics")).text)
    response = await real_client.post(
        "/v1/chat/completions", json=CHAT, headers={"X-Request-Id": "metrics-1"}
    )
    assert response.status_code == 200
    assert response.headers["x-request-id"] == "metrics-1"
    text = (await real_client.get("/metrics")).text
    after = _values(text)
    usage = response.json()["usage"]
    for name, grew_by in (
        ("vllm:prompt_tokens_total", usage["prompt_tokens"]),
        ("vllm:generation_tokens_total", usage["completion_tokens"]),
        ("vllm:request_success_total", 1),
        ("vllm:time_to_first_token_seconds_count", 1),
        ("vllm:e2e_request_latency_seconds_count", 1),
        ("vllm:request_queue_time_seconds_count", 1),
        ("lilac_admission_admitted_total", 1),
    ):
        assert after[name] - before.get(name, 0.0) == grew_by, name
    labels = {"engine": "0", "model_name": DEFAULT_MODEL_NAME}
    assert _labelled(text, "vllm:num_requests_running", labels)
    # vllm serve's time-to-first-token buckets start at 1 ms.
    assert _labelled(text, "vllm:time_to_first_token_seconds_bucket", {**labels, "le": "0.001"})
    missing = dashboard.metric_names(dashboard.load()) - dashboard.exported_names(text)
    assert missing == set()
