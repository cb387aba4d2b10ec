"""Two engines' stat loggers in one process (vLLM's own `PrometheusStatLogger`
machinery, configs of the prepared default model under two served names, no engine
started): both models' `vllm:` series are in the default registry, labelled
`model_name`, and recording for one leaves the other's alone."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import REGISTRY, generate_latest

from engine.checkpoint import default_model_dir, is_prepared


def _config(name: str) -> Any:
    from vllm.config import ModelConfig, VllmConfig

    path = default_model_dir()
    if not is_prepared(path):
        pytest.fail("the default model is not prepared: make model")
    model = ModelConfig(model=str(path), served_model_name=name, dtype="float32")
    return VllmConfig(model_config=model)


@pytest.fixture(autouse=True)
def _clean_registry() -> Iterator[None]:
    """The shared metrics this test makes leave the process's registry with it."""
    yield
    from vllm.v1.metrics.prometheus import unregister_vllm_metrics

    from engine.vllm_backend import shared_metrics

    unregister_vllm_metrics()
    shared_metrics._SHARED.clear()


def test_every_models_series_are_exported_under_its_own_label() -> None:
    from engine.vllm_backend.shared_metrics import SharedPrometheusStatLogger

    first = SharedPrometheusStatLogger(_config("alpha"), [0])
    SharedPrometheusStatLogger(_config("beta"), [0])
    first.counter_num_preempted_reqs[0].inc(3)
    text = generate_latest(REGISTRY).decode()
    for name in ("alpha", "beta"):
        assert f'vllm:num_requests_running{{engine="0",model_name="{name}"}}' in text
    assert 'vllm:num_preemptions_total{engine="0",model_name="alpha"} 3.0' in text
    assert 'vllm:num_preemptions_total{engine="0",model_name="beta"} 0.0' in text
    # One family per name: a valid exposition with both models in it.
    assert text.count("# TYPE vllm:num_requests_running gauge") == 1
