"""`make bench`: run the micro-benchmarks, compare with the baseline, re-run failures once.

    python -m perf bench [PYTEST_ARGS...]          # the gate: exit 1 on a regression
    python -m perf bench --save [PYTEST_ARGS...]   # record the run as the new baseline

A benchmark judged a regression (see `perf.micro.compare`) is run once more, together with
the calibration so that its machine-speed correction is fresh, and fails only if the
second run confirms it: one burst of other jobs on a shared machine does not fail CI.
Before the re-run it waits (up to `--max-wait` seconds) for the load average to drop to
the number of cores. A
benchmark of the baseline that the run lacks fails at once. Extra pytest arguments
(`-k template`) make the run partial: benchmarks they leave out are not judged.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from perf.harness.results import output
from perf.micro.compare import CALIBRATION, Judgement, judge, record, report

HERE = Path(__file__).resolve().parent
BASELINE = HERE / "baselines" / "baseline.json"
OUT = output("bench")
PYTEST_OPTS = [
    "-q",
    "-p",
    "no:cacheprovider",
    "--benchmark-warmup=on",
    # CPU time of this process, not wall time: time spent preempted by other jobs on a
    # shared machine does not count.
    "--benchmark-timer=time.process_time",
    "--benchmark-min-rounds=50",
    "--benchmark-max-time=0.5",
    "--benchmark-sort=name",
    "--benchmark-columns=min,median,iqr,rounds",
]


def run_benchmarks(json_path: Path, extra: list[str]) -> int:
    json_path.parent.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pytest", str(HERE), *PYTEST_OPTS]
    command += [f"--benchmark-json={json_path}", *extra]
    return subprocess.run(command, check=False).returncode


def rerun_filter(names: list[str]) -> list[str]:
    """pytest arguments that select exactly these benchmarks and the calibration."""
    return ["-k", " or ".join(sorted({CALIBRATION, *names}))]


def wait_for_quiet(
    max_wait_s: float,
    loadavg: Any = os.getloadavg,
    cores: int = os.cpu_count() or 1,
    sleep: Any = time.sleep,
    poll_s: float = 10.0,
) -> float:
    """Wait (at most `max_wait_s`) until the 1-minute load average is no higher than the
    number of cores; return it. Other jobs inflate even CPU time (shared caches), by
    more than the threshold when the machine is oversubscribed many times over."""
    waited = 0.0
    while (load := loadavg()[0]) > cores and waited < max_wait_s:
        print(f"load average {load:.1f} on {cores} cores: waiting for a quieter machine")
        sleep(poll_s)
        waited += poll_s
    return float(load)


def gate(
    baseline: dict[str, Any],
    first: Judgement,
    rerun: Any,
    threshold: float,
    quiet: Any = lambda: wait_for_quiet(0.0),
) -> bool:
    """Whether the run passes: `first` judged the whole run; `rerun(names)` runs those
    benchmarks again and returns the new JSON (or None when pytest itself failed)."""
    if first.missing or first.problems:
        return False
    if not first.regressions:
        return True
    names = first.regressions
    load = quiet()
    print(f"\nre-running {len(names)} benchmark(s) once to confirm: {', '.join(names)}")
    print(f"(load average {load:.1f})\n")
    again = rerun(names)
    if again is None:
        return False
    second = judge(baseline, again, threshold, partial=True)
    report(second, threshold)
    confirmed = [name for name in names if name in second.regressions]
    not_run = [name for name in names if name not in {row.name for row in second.rows if row.now}]
    if not_run:
        print(f"\nthe re-run lacks {', '.join(not_run)}")
    if second.problems:
        return False
    return not confirmed and not not_run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--save", action="store_true", help="record the run as the baseline")
    parser.add_argument("--baseline", type=Path, default=BASELINE)
    parser.add_argument("--threshold", type=float, default=25.0, help="percent (default 25)")
    parser.add_argument(
        "--max-wait",
        type=float,
        default=300.0,
        help="seconds to wait for a quieter machine before a re-run (default 300)",
    )
    args, pytest_args = parser.parse_known_args(argv)
    current_path = OUT / "bench.json"
    if run_benchmarks(current_path, pytest_args) != 0:
        print("the benchmarks failed to run")
        return 1
    if args.save:
        return record(current_path, args.baseline)
    if not args.baseline.exists():
        print(f"no baseline at {args.baseline}: run `make bench-save` first")
        return 1
    baseline = json.loads(args.baseline.read_text())
    threshold = args.threshold / 100
    first = judge(
        baseline, json.loads(current_path.read_text()), threshold, partial=bool(pytest_args)
    )
    report(first, threshold)

    def rerun(names: list[str]) -> Any:
        path = OUT / "bench-rerun.json"
        if run_benchmarks(path, [*pytest_args, *rerun_filter(names)]) != 0:
            return None
        return json.loads(path.read_text())

    passed = gate(baseline, first, rerun, threshold, lambda: wait_for_quiet(args.max_wait))
    print("\nbench: PASS" if passed else "\nbench: FAIL")
    return 0 if passed else 1
