"""The harnesses that split the HTTP process's CPU per token: the `vllm serve` command
lines of the comparison and where ours runs the engine's frontend, the layer a profiled
stack goes to, and the AsyncLLM-only floor's request shapes and CPU reading."""

from __future__ import annotations

import argparse

import pytest

from perf.load import asyncllm_floor, benchmark
from perf.load.profile_server import layer_of


def _args() -> argparse.Namespace:
    return argparse.Namespace(
        max_model_len=2048, gpu_memory_utilization=0.35, kv_cache_gib=1, tuned_flags=""
    )


def test_vllm_serve_runs_without_stats_unless_asked() -> None:
    plain = benchmark.server_argv("vllm", _args(), "/m", 8000)
    stats = benchmark.server_argv("vllm-stats", _args(), "/m", 8000)
    assert "--disable-log-stats" in plain
    assert "--disable-log-stats" not in stats
    assert [a for a in plain if a != "--disable-log-stats"] == stats


def test_only_ours_process_runs_the_engines_frontend_in_a_process_of_its_own() -> None:
    def flag(kind: str) -> str:
        argv = benchmark.server_argv(kind, _args(), "/m", 8000)
        return argv[argv.index("--engine-frontend-process") + 1]

    assert flag("ours-process") == "true"
    assert [flag(kind) for kind in ("ours", "ours-default", "ours-noadmit")] == ["false"] * 3


def test_engine_adapter_frames_count_as_ours_and_vllm_frames_as_vllm() -> None:
    ours = [
        "main (granian/server/mp.py:1)",
        "stream (/w/app/services/generation/service.py:10)",
        "stream_request (/w/engine/vllm_backend/request_stream.py:70)",
    ]
    assert layer_of(ours) == "our app (app/, engine adapter)"
    vllm = [*ours, "update (vllm/v1/engine/detokenizer.py:5)"]
    assert layer_of(vllm) == "vLLM output processing + detokenize"


@pytest.mark.parametrize(
    ("variant", "kind", "interval"),
    [("delta", "DELTA", None), ("final", "FINAL_ONLY", None), ("interval4", "DELTA", 4)],
)
def test_floor_variants_ask_the_engine_for_their_output_shape(
    variant: str, kind: str, interval: int | None
) -> None:
    params = asyncllm_floor.sampling(variant, 64)
    assert params.output_kind.name == kind
    assert params.stream_interval == interval
    assert params.max_tokens == 64 and params.ignore_eos


def test_floor_reads_this_process_cpu_in_nanoseconds() -> None:
    before = asyncllm_floor.process_cpu()
    total = 0
    while asyncllm_floor.process_cpu() - before < 0.002:
        total += sum(range(1000))
    assert total > 0
    assert asyncllm_floor.process_cpu() > before


def test_floor_refuses_an_unknown_variant() -> None:
    with pytest.raises(SystemExit):
        asyncllm_floor.main(["--variants", "delta,bogus"])
