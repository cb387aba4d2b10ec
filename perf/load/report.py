"""The load benchmark's table and target verdicts, from the rows a run collected.

python -m perf load-report perf/out/load/rows.json [--check]   # re-render a finished run

With `--check` (here and in `python -m perf load`) the exit status is the verdict: 0 when every
target was measured and met, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perf.harness.results import output

LABELS = {
    "ours": "lilac-serve",
    "ours-default": "lilac-serve, default admission limits",
    "ours-noadmit": "lilac-serve, admission skipped",
    "ours-tuned": "lilac-serve, tuned flags",
    "ours-process": "lilac-serve --engine-frontend-process true",
    "vllm": "vllm serve",
    "vllm-stats": "vllm serve, its stats on",
    "offline": "offline engine",
}
# (column title, row key or a function of the row); every column is also given as a ratio.
COLUMNS: list[tuple[str, Any]] = [
    ("out tok/s", "output_throughput"),
    ("req/s", "request_throughput"),
    ("TTFT p50 ms", "median_ttft_ms"),
    ("TTFT p99 ms", "p99_ttft_ms"),
    ("TPOT p50 ms", "median_tpot_ms"),
    ("HTTP CPU s / 1k tok", lambda r: 1000 * r["http_cpu_s"] / max(r["total_output_tokens"], 1)),
    # The engine's frontend process of `ours-process` (none elsewhere).
    (
        "frontend process CPU s / 1k tok",
        lambda r: 1000 * r["frontend_cpu_s"] / max(r["total_output_tokens"], 1),
    ),
    (
        "engine CPU s / 1k tok",
        lambda r: 1000 * r["engine_cpu_s"] / max(r["total_output_tokens"], 1),
    ),
    ("load avg before", "load_avg_1m_before"),  # the 1-minute load average at the start
    ("load avg", "load_avg_1m"),  # the machine's 1-minute load average at the end of the run
]
# Columns given as a ratio: all but the load averages.
RATIO_COLUMNS = COLUMNS[:-2]


def _value(row: dict[str, Any], key: Any) -> float | None:
    try:
        return float(key(row) if callable(key) else row[key])
    except (KeyError, TypeError):
        return None


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def _find(rows: list[dict[str, Any]], kind: str, concurrency: int) -> dict[str, Any] | None:
    return next((r for r in rows if r["kind"] == kind and r["concurrency"] == concurrency), None)


def table(rows: list[dict[str, Any]]) -> str:
    titles = [t for t, _ in COLUMNS]
    lines = [
        "| conc. | run | prompts | " + " | ".join(titles) + " |",
        "| ---: | --- | ---: | " + " | ".join("---:" for _ in titles) + " |",
    ]
    for concurrency in sorted({r["concurrency"] for r in rows}):
        found = {kind: _find(rows, kind, concurrency) for kind in LABELS}
        for kind, row in found.items():
            if row is None:
                continue
            values = " | ".join(_fmt(_value(row, key)) for _, key in COLUMNS)
            prompts = f"{row.get('completed', '?')}/{row['num_prompts']}"
            lines.append(f"| {concurrency} | {LABELS[kind]} | {prompts} | {values} |")
        for reference in ("vllm", "vllm-stats"):
            lines += _ratio_lines(found, reference, concurrency)
    return "\n".join(lines)


def _ratio_lines(
    found: dict[str, dict[str, Any] | None], reference: str, concurrency: int
) -> list[str]:
    lines = []
    vllm = found[reference]
    for kind, title in (("ours", "ours"), ("ours-tuned", "tuned"), ("ours-process", "process")):
        ours = found[kind]
        if ours and vllm:
            ratios = []
            for _, key in RATIO_COLUMNS:
                a, b = _value(ours, key), _value(vllm, key)
                ratios.append(f"**{a / b:.2f}**" if a is not None and b else "-")
            lines.append(
                f"| {concurrency} | {title} ÷ {LABELS[reference]} | | "
                + " | ".join(ratios)
                + " | | |"
            )
    return lines


def _cpu_per_1k(rows: list[dict[str, Any]], kind: str) -> float | None:
    picked = [r for r in rows if r["kind"] == kind]
    tokens = sum(r["total_output_tokens"] for r in picked)
    return 1000 * sum(r["http_cpu_s"] for r in picked) / tokens if tokens else None


# Servers run one after the other on a shared machine: "no worse" allows this much noise.
TOLERANCE = 0.05
HTTP_COST_TARGET = 0.5  # ours ÷ vllm serve's HTTP-process CPU per output token


@dataclass(frozen=True)
class Verdict:
    target: str
    met: bool | None  # None: not measured in this run
    detail: str


def verdicts(
    rows: list[dict[str, Any]],
    ceiling: list[dict[str, Any]] | None = None,
    tolerance: float = TOLERANCE,
) -> list[Verdict]:
    """Each target, met or missed, at every concurrency both servers ran."""
    out: list[Verdict] = []
    both = sorted(
        {r["concurrency"] for r in rows if r["kind"] == "ours"}
        & {r["concurrency"] for r in rows if r["kind"] == "vllm"}
    )
    if not both:
        out.append(Verdict("ours and vllm serve side by side", None, "not both run"))
    for c in both:
        ours, vllm = _find(rows, "ours", c), _find(rows, "vllm", c)
        assert ours is not None and vllm is not None
        done, sent = ours.get("completed", 0), ours["num_prompts"]
        out.append(Verdict(f"c={c}: every request answered", done == sent, f"{done}/{sent}"))
        a, b = ours["output_throughput"], vllm["output_throughput"]
        out.append(
            Verdict(
                f"c={c}: output tok/s ≥ vllm serve's (-{tolerance:.0%} noise)",
                a >= b * (1 - tolerance),
                f"{a:.1f} vs {b:.1f}, {a / b:.2f}",
            )
        )
        a, b = ours["median_ttft_ms"], vllm["median_ttft_ms"]
        out.append(
            Verdict(
                f"c={c}: TTFT p50 ≤ vllm serve's (+{tolerance:.0%} noise)",
                a <= b * (1 + tolerance),
                f"{a:,.0f} vs {b:,.0f} ms, {a / b:.2f}",
            )
        )
        a_cpu, b_cpu = _cpu_per_1k([ours], "ours"), _cpu_per_1k([vllm], "vllm")
        if a_cpu is not None and b_cpu:
            out.append(
                Verdict(
                    f"c={c}: HTTP-process CPU per 1k output tokens ≤ "
                    f"{HTTP_COST_TARGET}x vllm serve's",
                    a_cpu <= HTTP_COST_TARGET * b_cpu,
                    f"{a_cpu:.3f} vs {b_cpu:.3f} s, {a_cpu / b_cpu:.2f}",
                )
            )
    ours, offline = _find(rows, "ours", 1), _find(rows, "offline", 1)
    if ours and offline:
        a, b = ours["median_ttft_ms"], offline["median_ttft_ms"]
        out.append(
            Verdict(
                "c=1: TTFT p50 within 5% of the offline engine",
                a <= 1.05 * b,
                f"{a:.1f} ms vs {b:.1f} ms, {100 * (a / b - 1):+.1f}%",
            )
        )
    streamed = [r["tokens_per_cpu_s"] for r in ceiling or [] if r["scenario"] == "streamed"]
    if streamed:  # a ceiling run `--only non-streamed` has none
        best = max(streamed)
        out.append(
            Verdict(
                "frontend ceiling ≥ 20,000 streamed tok/s per core", best >= 20_000, f"{best:,}"
            )
        )
    return out


def targets(verdict_list: list[Verdict]) -> str:
    lines = []
    for v in verdict_list:
        mark = "n/a" if v.met is None else ("MET" if v.met else "MISSED")
        lines.append(f"- {v.target}: **{mark}** ({v.detail})")
    return "\n".join(lines)


def all_met(verdict_list: list[Verdict]) -> bool:
    """The gate of `--check`: every target measured and met."""
    return bool(verdict_list) and all(v.met is True for v in verdict_list)


def _ceiling() -> list[dict[str, Any]] | None:
    path = output("frontend-ceiling") / "frontend_ceiling.json"
    return json.loads(path.read_text()) if path.exists() else None


def report(rows: list[dict[str, Any]], meta: dict[str, Any]) -> tuple[str, bool]:
    """The summary text and whether every target was met."""
    found = verdicts(rows, _ceiling())
    settings = ", ".join(f"{k}={v}" for k, v in meta.items() if not k.startswith("_"))
    text = f"{table(rows)}\n\nSettings: {settings}\n\nTargets:\n{targets(found)}"
    met = all_met(found)
    return f"{text}\n\nAll targets met: {'yes' if met else 'no'}", met


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Re-render a finished load run.")
    parser.add_argument("rows", nargs="?", type=Path, default=output("load") / "rows.json")
    parser.add_argument("--check", action="store_true", help="exit 1 unless every target is met")
    args = parser.parse_args(argv)
    text, met = report(json.loads(args.rows.read_text()), {"rows": str(args.rows)})
    print(text)
    return 0 if met or not args.check else 1
