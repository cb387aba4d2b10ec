"""Compare a pytest-benchmark JSON run with the committed baseline; exit 1 on a regression.

    python -m perf.compare perf/baselines/baseline.json perf/out/bench.json [--threshold 25]
    python -m perf.compare --record perf/out/bench.json perf/baselines/baseline.json

For each benchmark: the baseline and current medians, `ratio` (current / baseline; above
1 is slower), `adj` (the ratio divided by the calibration benchmark's ratio, i.e.
corrected for how much slower or faster the machine is right now) and `min` (the same
ratio on the fastest round). A benchmark regresses when `ratio`, `adj` and `min` all
exceed 1 + threshold: a real slowdown of the code shows in all three, while a busy
machine inflates the median of long benchmarks (rounds get preempted) but hardly their
fastest round. Benchmarks with `extra_info["units"]` (e.g. the 256 tokens of one
streamed request) also show the median per unit.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

CALIBRATION = "test_calibration"


def medians(run: dict[str, Any]) -> dict[str, tuple[float, dict[str, Any], float]]:
    return {
        b["name"]: (b["stats"]["median"], b.get("extra_info", {}), b["stats"]["min"])
        for b in run["benchmarks"]
    }


def _time(seconds: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


def _machine(run: dict[str, Any]) -> str:
    info = run.get("machine_info", {})
    cpu = info.get("cpu", {}).get("brand_raw", "?")
    return (
        f"{cpu}, {info.get('cpu', {}).get('count', '?')} cpus, python {info.get('python_version')}"
    )


def compare(baseline: dict[str, Any], current: dict[str, Any], threshold: float) -> int:
    base, now = medians(baseline), medians(current)
    if _machine(baseline) != _machine(current):
        print(f"note: baseline machine: {_machine(baseline)}")
        print(f"      this machine:     {_machine(current)}")
    calibration = 1.0
    if CALIBRATION in base and CALIBRATION in now:
        calibration = now[CALIBRATION][0] / base[CALIBRATION][0]
    print(f"machine speed vs baseline (calibration ratio): {calibration:.2f}")
    header = (
        f"{'benchmark':36} {'baseline':>10} {'now':>10} {'ratio':>6} {'adj':>6} {'min':>6} "
        f"{'per unit':>16}  verdict"
    )
    print(header)
    print("-" * len(header))
    failures = []
    limit = 1.0 + threshold
    for name in sorted(set(base) | set(now), key=lambda n: (n != CALIBRATION, n)):
        if name not in now:
            print(f"{name:36} {'':>10} {'':>10} {'':>6} {'':>6} {'':>6} {'':>16}  MISSING")
            continue
        median, extra, fastest = now[name]
        units = extra.get("units")
        per_unit = f"{_time(median / units)}/{extra.get('unit', 'unit')}" if units else ""
        if name not in base:
            blank = f"{'':>6} {'':>6} {'':>6}"
            print(f"{name:36} {'':>10} {_time(median):>10} {blank} {per_unit:>16}  new")
            continue
        ratio = median / base[name][0]
        adjusted = ratio / calibration
        min_ratio = fastest / base[name][2]
        verdict = "ok"
        if name != CALIBRATION and min(ratio, adjusted, min_ratio) > limit:
            verdict = f"REGRESSION (>{threshold:.0%})"
            failures.append(name)
        elif name != CALIBRATION and max(ratio, adjusted, min_ratio) < 1 / limit:
            verdict = "faster"
        print(
            f"{name:36} {_time(base[name][0]):>10} {_time(median):>10} "
            f"{ratio:6.2f} {adjusted:6.2f} {min_ratio:6.2f} {per_unit:>16}  {verdict}"
        )
    if failures:
        print(f"\n{len(failures)} regression(s) over {threshold:.0%} on the median:")
        print("  " + ", ".join(failures))
        print("Rerun `make bench` on a quiet machine to confirm; `make bench-save` to accept.")
        return 1
    print(f"\nno regression over {threshold:.0%} on the median")
    return 0


def record(run: Path, baseline: Path) -> int:
    """Write `run` as the baseline without the per-round timings (megabytes of them)."""
    data = json.loads(run.read_text())
    for bench in data["benchmarks"]:
        bench["stats"].pop("data", None)
    baseline.parent.mkdir(parents=True, exist_ok=True)
    baseline.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    print(f"baseline recorded: {baseline} ({len(data['benchmarks'])} benchmarks)")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("baseline", type=Path, help="with --record: the run to record")
    parser.add_argument("current", type=Path, help="with --record: the baseline to write")
    parser.add_argument("--threshold", type=float, default=25.0, help="percent (default 25)")
    parser.add_argument("--record", action="store_true", help="record a run as the baseline")
    args = parser.parse_args(argv)
    if args.record:
        return record(args.baseline, args.current)
    if not args.baseline.exists():
        print(f"no baseline at {args.baseline}: run `make bench-save` first")
        return 1
    baseline = json.loads(args.baseline.read_text())
    current = json.loads(args.current.read_text())
    return compare(baseline, current, args.threshold / 100)


if __name__ == "__main__":
    sys.exit(main())
