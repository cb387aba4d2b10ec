"""Compare a pytest-benchmark JSON run with the committed baseline; exit 1 on a regression.

    python -m perf compare perf/micro/baselines/baseline.json perf/out/bench/bench.json
    python -m perf compare --record perf/out/bench/bench.json perf/micro/baselines/baseline.json

For each benchmark: the baseline and current medians, `ratio` (current / baseline on the
median; above 1 is slower, shown for reference only), `adj` (that ratio divided by the
calibration benchmark's, i.e. corrected for how much slower or faster the machine is
right now) and `min` (the same correction on the fastest round: this benchmark's
fastest-round ratio divided by the calibration's). A benchmark regresses when both
`adj` and `min` exceed 1 + threshold: a slower code path shows in both, on a faster or a
slower machine alike, while a busy machine inflates medians (rounds get preempted) but
hardly the fastest round. The raw ratio is not a criterion: on a faster machine it hides
a slowdown. A benchmark of the baseline that is missing from the run fails too (unless
the run is declared partial), and so does a run or a baseline without the calibration.
Benchmarks with `extra_info["units"]` (e.g. the 256 tokens of one streamed request) also
show the median per unit.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CALIBRATION = "test_calibration"


@dataclass(frozen=True)
class Stats:
    median: float
    fastest: float
    extra: dict[str, Any]


@dataclass(frozen=True)
class Row:
    name: str
    verdict: str  # ok, faster, new, REGRESSION, MISSING, not run
    base: Stats | None = None
    now: Stats | None = None
    ratio: float | None = None
    adjusted: float | None = None
    fastest: float | None = None


@dataclass
class Judgement:
    calibration_median: float
    calibration_fastest: float
    rows: list[Row] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # a run that cannot be judged

    @property
    def regressions(self) -> list[str]:
        return [row.name for row in self.rows if row.verdict == "REGRESSION"]

    @property
    def missing(self) -> list[str]:
        return [row.name for row in self.rows if row.verdict == "MISSING"]

    @property
    def failed(self) -> bool:
        return bool(self.regressions or self.missing or self.problems)


def stats(run: dict[str, Any]) -> dict[str, Stats]:
    return {b["name"]: _stats(b) for b in run["benchmarks"]}


def _stats(bench: dict[str, Any]) -> Stats:
    numbers = bench["stats"]
    fastest = numbers["min"]
    if fastest <= 0:
        # A round the CPU-time clock saw take no time at all (it happens, rarely): the
        # first quartile stands in for the fastest round.
        fastest = numbers.get("q1") or numbers["median"]
    return Stats(numbers["median"], fastest, bench.get("extra_info", {}))


def judge(
    baseline: dict[str, Any],
    current: dict[str, Any],
    threshold: float,
    *,
    partial: bool = False,
) -> Judgement:
    """Each benchmark's verdict. `partial`: the run covers only some benchmarks on
    purpose (a pytest `-k`), so the ones it lacks are `not run` rather than MISSING."""
    base, now = stats(baseline), stats(current)
    judgement = Judgement(1.0, 1.0)
    if CALIBRATION in base and CALIBRATION in now:
        judgement.calibration_median = now[CALIBRATION].median / base[CALIBRATION].median
        judgement.calibration_fastest = now[CALIBRATION].fastest / base[CALIBRATION].fastest
    elif CALIBRATION not in base:
        judgement.problems.append(f"the baseline has no {CALIBRATION}: record it again")
    elif not partial:
        judgement.problems.append(f"the run has no {CALIBRATION}: nothing to adjust by")
    limit = 1.0 + threshold
    for name in sorted(set(base) | set(now), key=lambda n: (n != CALIBRATION, n)):
        if name not in now:
            judgement.rows.append(Row(name, "not run" if partial else "MISSING", base[name]))
            continue
        if name not in base:
            judgement.rows.append(Row(name, "new", now=now[name]))
            continue
        ratio = now[name].median / base[name].median
        adjusted = ratio / judgement.calibration_median
        fastest = now[name].fastest / base[name].fastest / judgement.calibration_fastest
        verdict = "ok"
        if name != CALIBRATION and min(adjusted, fastest) > limit:
            verdict = "REGRESSION"
        elif name != CALIBRATION and max(adjusted, fastest) < 1 / limit:
            verdict = "faster"
        judgement.rows.append(Row(name, verdict, base[name], now[name], ratio, adjusted, fastest))
    return judgement


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


def _per_unit(stats: Stats | None) -> str:
    units = stats.extra.get("units") if stats else None
    if not stats or not units:
        return ""
    return f"{_time(stats.median / units)}/{stats.extra.get('unit', 'unit')}"


def report(judgement: Judgement, threshold: float) -> None:
    print(
        f"machine speed vs baseline (calibration ratio): median "
        f"{judgement.calibration_median:.2f}, fastest round {judgement.calibration_fastest:.2f}"
    )
    header = (
        f"{'benchmark':38} {'baseline':>10} {'now':>10} {'ratio':>6} {'adj':>6} {'min':>6} "
        f"{'per unit':>16}  verdict"
    )
    print(header)
    print("-" * len(header))
    for row in judgement.rows:
        base = _time(row.base.median) if row.base else ""
        now = _time(row.now.median) if row.now else ""
        numbers = " ".join(
            f"{value:6.2f}" if value is not None else f"{'':>6}"
            for value in (row.ratio, row.adjusted, row.fastest)
        )
        verdict = f"REGRESSION (>{threshold:.0%})" if row.verdict == "REGRESSION" else row.verdict
        print(f"{row.name:38} {base:>10} {now:>10} {numbers} {_per_unit(row.now):>16}  {verdict}")
    for problem in judgement.problems:
        print(f"\nERROR: {problem}")
    if judgement.missing:
        print(f"\n{len(judgement.missing)} benchmark(s) of the baseline missing from the run:")
        print("  " + ", ".join(judgement.missing))
    if judgement.regressions:
        print(f"\n{len(judgement.regressions)} regression(s) over {threshold:.0%}:")
        print("  " + ", ".join(judgement.regressions))
    if not judgement.failed:
        print(f"\nno regression over {threshold:.0%}")


def compare(
    baseline: dict[str, Any], current: dict[str, Any], threshold: float, partial: bool = False
) -> int:
    if _machine(baseline) != _machine(current):
        print(f"note: baseline machine: {_machine(baseline)}")
        print(f"      this machine:     {_machine(current)}")
    judgement = judge(baseline, current, threshold, partial=partial)
    report(judgement, threshold)
    return 1 if judgement.failed else 0


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
    parser.add_argument(
        "--partial", action="store_true", help="the run covers some benchmarks on purpose"
    )
    args = parser.parse_args(argv)
    if args.record:
        return record(args.baseline, args.current)
    if not args.baseline.exists():
        print(f"no baseline at {args.baseline}: run `make bench-save` first")
        return 1
    baseline = json.loads(args.baseline.read_text())
    current = json.loads(args.current.read_text())
    return compare(baseline, current, args.threshold / 100, partial=args.partial)
