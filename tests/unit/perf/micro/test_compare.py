"""The benchmark gate: what counts as a regression, a missing benchmark, and the re-run."""

from __future__ import annotations

from typing import Any

import pytest

from perf.micro.bench import gate, rerun_filter, wait_for_quiet
from perf.micro.compare import CALIBRATION, compare, judge

THRESHOLD = 0.25


def run(**benchmarks: tuple[float, float]) -> dict[str, Any]:
    """A pytest-benchmark JSON document: name -> (median, fastest round) in µs."""
    return {
        "machine_info": {"cpu": {"brand_raw": "test cpu", "count": 2}, "python_version": "3"},
        "benchmarks": [
            {"name": name, "stats": {"median": median * 1e-6, "min": fastest * 1e-6}}
            for name, (median, fastest) in benchmarks.items()
        ],
    }


BASE = run(test_calibration=(100, 90), test_a=(10, 9), test_b=(50, 40))


def verdicts(current: dict[str, Any], partial: bool = False) -> dict[str, str]:
    judgement = judge(BASE, current, THRESHOLD, partial=partial)
    return {row.name: row.verdict for row in judgement.rows}


def test_same_figures_pass() -> None:
    judgement = judge(BASE, BASE, THRESHOLD)
    assert not judgement.failed
    assert set(verdicts(BASE).values()) == {"ok"}


def test_slower_code_on_the_same_machine_is_a_regression() -> None:
    current = run(test_calibration=(100, 90), test_a=(14, 12.6), test_b=(50, 40))
    judgement = judge(BASE, current, THRESHOLD)
    assert judgement.regressions == ["test_a"]
    assert judgement.failed
    assert compare(BASE, current, THRESHOLD) == 1


def test_a_faster_machine_does_not_hide_a_slowdown() -> None:
    # The machine is twice as fast (calibration halves); test_a's code got 1.5x slower,
    # so its raw time is 0.75 of the baseline: the raw ratio says faster, adj says slower.
    current = run(test_calibration=(50, 45), test_a=(7.5, 6.75), test_b=(25, 20))
    judgement = judge(BASE, current, THRESHOLD)
    row = next(r for r in judgement.rows if r.name == "test_a")
    assert row.ratio is not None and row.ratio < 1
    assert judgement.regressions == ["test_a"]


def test_a_busy_machine_is_not_a_regression() -> None:
    # Preempted rounds inflate the medians of the long benchmarks (more than the short
    # calibration's), but the fastest rounds stay where they were.
    current = run(test_calibration=(110, 90), test_a=(11, 9), test_b=(90, 41))
    judgement = judge(BASE, current, THRESHOLD)
    assert not judgement.failed, judgement.rows


def test_a_slower_machine_is_not_a_regression() -> None:
    current = run(test_calibration=(200, 180), test_a=(20, 18), test_b=(100, 80))
    assert not judge(BASE, current, THRESHOLD).failed


def test_one_fast_outlier_round_alone_does_not_pass_a_slowdown_nor_fail_a_fast_run() -> None:
    # Slower median but the same fastest round: not a regression (one criterion only).
    assert not judge(
        BASE, run(test_calibration=(100, 90), test_a=(20, 9), test_b=(50, 40)), THRESHOLD
    ).failed
    # Both criteria over: a regression.
    assert verdicts(run(test_calibration=(100, 90), test_a=(20, 18), test_b=(50, 40)))[
        "test_a"
    ] == ("REGRESSION")


def test_faster_is_marked() -> None:
    current = run(test_calibration=(100, 90), test_a=(5, 4.5), test_b=(50, 40))
    assert verdicts(current)["test_a"] == "faster"
    assert not judge(BASE, current, THRESHOLD).failed


def test_a_missing_benchmark_fails() -> None:
    current = run(test_calibration=(100, 90), test_a=(10, 9))
    judgement = judge(BASE, current, THRESHOLD)
    assert judgement.missing == ["test_b"]
    assert judgement.failed
    assert compare(BASE, current, THRESHOLD) == 1


def test_a_partial_run_does_not_judge_what_it_left_out() -> None:
    current = run(test_calibration=(100, 90), test_a=(10, 9))
    assert verdicts(current, partial=True)["test_b"] == "not run"
    assert not judge(BASE, current, THRESHOLD, partial=True).failed


def test_a_run_without_the_calibration_fails() -> None:
    judgement = judge(BASE, run(test_a=(10, 9), test_b=(50, 40)), THRESHOLD)
    assert judgement.problems and judgement.failed


def test_a_baseline_without_the_calibration_fails() -> None:
    baseline = run(test_a=(10, 9))
    assert judge(baseline, run(test_calibration=(1, 1), test_a=(10, 9)), THRESHOLD).failed


def test_a_new_benchmark_passes_until_recorded() -> None:
    current = run(test_calibration=(100, 90), test_a=(10, 9), test_b=(50, 40), test_c=(1, 1))
    assert verdicts(current)["test_c"] == "new"
    assert not judge(BASE, current, THRESHOLD).failed


SLOW_A = run(test_calibration=(100, 90), test_a=(14, 12.6), test_b=(50, 40))


def test_a_regression_is_rerun_once_and_passes_when_not_confirmed() -> None:
    asked: list[list[str]] = []

    def rerun(names: list[str]) -> dict[str, Any]:
        asked.append(names)
        return run(test_calibration=(100, 90), test_a=(10, 9))

    assert gate(BASE, judge(BASE, SLOW_A, THRESHOLD), rerun, THRESHOLD)
    assert asked == [["test_a"]]


def test_a_confirmed_regression_fails() -> None:
    def rerun(names: list[str]) -> dict[str, Any]:
        return run(test_calibration=(100, 90), test_a=(14, 12.6))

    assert not gate(BASE, judge(BASE, SLOW_A, THRESHOLD), rerun, THRESHOLD)


def test_a_rerun_that_lacks_the_benchmark_or_fails_to_run_fails() -> None:
    first = judge(BASE, SLOW_A, THRESHOLD)
    assert not gate(BASE, first, lambda names: run(test_calibration=(100, 90)), THRESHOLD)
    assert not gate(BASE, first, lambda names: None, THRESHOLD)


def test_missing_fails_without_a_rerun() -> None:
    def rerun(names: list[str]) -> dict[str, Any]:
        raise AssertionError("a missing benchmark is not re-run")

    first = judge(BASE, run(test_calibration=(100, 90), test_a=(10, 9)), THRESHOLD)
    assert not gate(BASE, first, rerun, THRESHOLD)


def test_a_clean_run_is_not_rerun() -> None:
    def rerun(names: list[str]) -> dict[str, Any]:
        raise AssertionError("nothing to re-run")

    assert gate(BASE, judge(BASE, BASE, THRESHOLD), rerun, THRESHOLD)


def test_the_rerun_selects_the_benchmarks_and_the_calibration() -> None:
    assert rerun_filter(["test_b", "test_a"]) == ["-k", f"test_a or test_b or {CALIBRATION}"]


def test_the_rerun_waits_for_a_quieter_machine() -> None:
    loads = iter([9.0, 6.0, 1.5])
    slept: list[float] = []
    load = wait_for_quiet(60, loadavg=lambda: (next(loads),), cores=2, sleep=slept.append)
    assert load == 1.5 and slept == [10.0, 10.0]


def test_the_wait_is_bounded() -> None:
    slept: list[float] = []
    load = wait_for_quiet(30, loadavg=lambda: (20.0,), cores=2, sleep=slept.append)
    assert load == 20.0 and slept == [10.0, 10.0, 10.0]


def test_a_fastest_round_of_zero_falls_back_to_the_first_quartile() -> None:
    baseline = run(test_calibration=(100, 90), test_a=(10, 9))
    baseline["benchmarks"][1]["stats"].update(min=0.0, q1=9.5e-6)
    judgement = judge(baseline, run(test_calibration=(100, 90), test_a=(10, 9.5)), THRESHOLD)
    row = next(r for r in judgement.rows if r.name == "test_a")
    assert row.fastest == pytest.approx(1.0) and not judgement.failed
