"""vLLM's `vllm:` series on /metrics: on by default (the shared `server`, as `make
serve` runs: its engine's frontend in a process of its own, which keeps the series and
hands them over at each scrape), left out by `--engine-metrics false` (the keys server),
while the `lilac_` series stay; one completion through each, read back from raw
/metrics."""

from __future__ import annotations

import httpx
import openai

from perf.harness.servers import Server
from tests.e2e.conftest import KeysServer
from tests.e2e.test_engine_frontend_process import runs_engine_apart


def _series(base_url: str, headers: dict[str, str] | None = None) -> set[str]:
    response = httpx.get(f"{base_url}/metrics", headers=headers or {}, timeout=30)
    assert response.status_code == 200, response.text
    # One exposition: no family twice (the HTTP process's and the engine's differ).
    types = [line for line in response.text.splitlines() if line.startswith("# TYPE ")]
    assert len(types) == len(set(types)), sorted(t for t in types if types.count(t) > 1)
    names = set()
    for line in response.text.splitlines():
        if line and not line.startswith("#"):
            names.add(line.split("{", 1)[0].split(" ", 1)[0])
    return names


def _complete(client: openai.OpenAI, model: str) -> int:
    completion = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Hi"}], max_tokens=2
    )
    assert completion.usage is not None
    return completion.usage.completion_tokens


def test_the_default_server_has_vllms_series_beside_ours(server: Server) -> None:
    assert runs_engine_apart(server)  # the series come from the engine's own process
    client = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="unused")
    model = client.models.list().data[0].id
    assert _complete(client, model) >= 1
    names = _series(server.base_url)
    assert "vllm:generation_tokens_total" in names
    assert "vllm:time_to_first_token_seconds_bucket" in names
    assert any(name.startswith("lilac_") for name in names)


def test_engine_metrics_false_leaves_out_every_vllm_series(keys_server: KeysServer) -> None:
    key = keys_server.new_key("engine-metrics-off", rpm=None)
    client = keys_server.client(key)
    model = client.models.list().data[0].id
    assert _complete(client, model) >= 1
    names = _series(keys_server.url)
    assert not [name for name in names if name.startswith("vllm:")], sorted(names)[:20]
    assert {"lilac_engine_ready", "lilac_http_requests_total", "lilac_usage_written_total"} <= names
