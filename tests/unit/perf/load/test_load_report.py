"""`make load --check`: each target met or missed, and the exit status that says so."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from perf.load import report
from perf.load.report import all_met, main, verdicts


def row(
    kind: str, c: int, tok_s: float, ttft: float, cpu_s: float, done: int = 8
) -> dict[str, Any]:
    return {
        "kind": kind,
        "concurrency": c,
        "num_prompts": 8,
        "completed": done,
        "output_throughput": tok_s,
        "request_throughput": tok_s / 64,
        "median_ttft_ms": ttft,
        "p99_ttft_ms": ttft,
        "median_tpot_ms": 50.0,
        "http_cpu_s": cpu_s,
        "engine_cpu_s": 10.0,
        "total_output_tokens": 1000,
        "load_avg_1m": 1.0,
    }


GOOD = [row("ours", 16, 90, 4000, 0.05), row("vllm", 16, 90, 4100, 0.15)]


def test_all_met() -> None:
    found = verdicts(GOOD)
    assert [v.met for v in found] == [True] * 4
    assert all_met(found)


def test_each_target_can_miss() -> None:
    cases = {
        "every request answered": row("ours", 16, 90, 4000, 0.05, done=7),
        "output tok/s": row("ours", 16, 80, 4000, 0.05),
        "TTFT p50": row("ours", 16, 90, 5000, 0.05),
        "HTTP-process CPU": row("ours", 16, 90, 4000, 0.1),
    }
    for target, ours in cases.items():
        found = verdicts([ours, GOOD[1]])
        missed = [v.target for v in found if v.met is False]
        assert len(missed) == 1 and target in missed[0], (target, missed)
        assert not all_met(found)


def test_noise_within_tolerance_is_met() -> None:
    found = verdicts([row("ours", 16, 86, 4300, 0.05), GOOD[1]])
    assert all_met(found)


def test_without_both_servers_nothing_is_met() -> None:
    assert not all_met(verdicts([GOOD[0]]))


def test_check_exit_status(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(report, "_ceiling", lambda: None)  # not this checkout's last run
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text(json.dumps(GOOD))
    bad.write_text(json.dumps([row("ours", 16, 50, 4000, 0.05), GOOD[1]]))
    assert main([str(good), "--check"]) == 0
    assert main([str(bad), "--check"]) == 1
    assert main([str(bad)]) == 0  # without --check it only reports


def test_a_tuned_run_gets_its_own_ratio_row() -> None:
    from perf.load.report import table

    text = table([*GOOD, row("ours-tuned", 16, 99, 3690, 0.05)])
    tuned = next(line for line in text.splitlines() if "tuned ÷ vllm serve" in line)
    assert "**1.10**" in tuned and "**0.90**" in tuned
    assert "lilac-serve, tuned flags" in text


def test_a_ceiling_without_a_streamed_run_has_no_verdict() -> None:
    non_streamed = [{"scenario": "non-streamed", "tokens_per_cpu_s": 40_000}]
    streamed = [*non_streamed, {"scenario": "streamed", "tokens_per_cpu_s": 30_000}]
    assert not any("frontend ceiling" in v.target for v in verdicts(GOOD, non_streamed))
    (ceiling,) = [v for v in verdicts(GOOD, streamed) if "frontend ceiling" in v.target]
    assert ceiling.met and ceiling.detail == "30,000"
