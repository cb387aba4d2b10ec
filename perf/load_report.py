"""The load benchmark's table and target verdicts, from the rows perf/load.py collects.

python -m perf.load_report perf/out/load/rows.json   # re-render a finished run
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

LABELS = {"ours": "lilac-serve", "vllm": "vllm serve", "offline": "offline engine"}
# (column title, row key or a function of the row); every column is also given as a ratio.
COLUMNS: list[tuple[str, Any]] = [
    ("out tok/s", "output_throughput"),
    ("req/s", "request_throughput"),
    ("TTFT p50 ms", "median_ttft_ms"),
    ("TTFT p99 ms", "p99_ttft_ms"),
    ("TPOT p50 ms", "median_tpot_ms"),
    ("HTTP CPU s / 1k tok", lambda r: 1000 * r["http_cpu_s"] / max(r["total_output_tokens"], 1)),
    (
        "engine CPU s / 1k tok",
        lambda r: 1000 * r["engine_cpu_s"] / max(r["total_output_tokens"], 1),
    ),
    ("load avg", "load_avg_1m"),  # the machine's 1-minute load average at the end of the run
]


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
        ours, vllm = found["ours"], found["vllm"]
        if ours and vllm:
            ratios = []
            for _, key in COLUMNS[:-2]:
                a, b = _value(ours, key), _value(vllm, key)
                ratios.append(f"**{a / b:.2f}**" if a is not None and b else "-")
            lines.append(
                f"| {concurrency} | ours ÷ vllm serve | | " + " | ".join(ratios) + " | | |"
            )
    return "\n".join(lines)


def _cpu_per_1k(rows: list[dict[str, Any]], kind: str) -> float | None:
    picked = [r for r in rows if r["kind"] == kind]
    tokens = sum(r["total_output_tokens"] for r in picked)
    return 1000 * sum(r["http_cpu_s"] for r in picked) / tokens if tokens else None


def targets(rows: list[dict[str, Any]], ceiling: list[dict[str, Any]] | None) -> str:
    lines = []

    def verdict(name: str, ok: bool | None, detail: str) -> None:
        mark = "n/a" if ok is None else ("MET" if ok else "MISSED")
        lines.append(f"- {name}: **{mark}** ({detail})")

    for concurrency in (16, 64):
        ours, vllm = _find(rows, "ours", concurrency), _find(rows, "vllm", concurrency)
        if ours and vllm:
            a, b = ours["output_throughput"], vllm["output_throughput"]
            verdict(f"output tok/s at c={concurrency} ≥ vllm serve", a >= b, f"{a:.1f} vs {b:.1f}")
    a, b = _cpu_per_1k(rows, "ours"), _cpu_per_1k(rows, "vllm")
    if a is not None and b:
        verdict(
            "HTTP-process CPU per 1k output tokens ≤ ½ vllm serve's (all runs)",
            a <= b / 2,
            f"{a:.2f} s vs {b:.2f} s, ratio {a / b:.2f}",
        )
    ours, offline = _find(rows, "ours", 1), _find(rows, "offline", 1)
    if ours and offline:
        a, b = ours["median_ttft_ms"], offline["median_ttft_ms"]
        verdict(
            "TTFT p50 at c=1 within 5% of the offline engine",
            a <= 1.05 * b,
            f"{a:.1f} ms vs {b:.1f} ms, {100 * (a / b - 1):+.1f}%",
        )
    if ceiling:
        best = max(r["tokens_per_cpu_s"] for r in ceiling if r["scenario"] == "streamed")
        verdict("frontend ceiling ≥ 20,000 streamed tok/s per core", best >= 20_000, f"{best:,}")
    return "\n".join(lines)


def report(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    ceiling_path = Path(__file__).resolve().parent / "out" / "frontend_ceiling.json"
    ceiling = json.loads(ceiling_path.read_text()) if ceiling_path.exists() else None
    settings = ", ".join(f"{k}={v}" for k, v in meta.items() if not k.startswith("_"))
    return f"{table(rows)}\n\nSettings: {settings}\n\nTargets:\n{targets(rows, ceiling)}"


if __name__ == "__main__":
    path = Path(sys.argv[1] if len(sys.argv) > 1 else "perf/out/load/rows.json")
    print(report(json.loads(path.read_text()), {"rows": str(path)}))
