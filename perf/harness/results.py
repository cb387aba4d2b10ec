"""Where the suite's runs write: every scenario's raw output (JSON, logs) under
`perf/out/SCENARIO/` (ignored by git), and the figures worth keeping in
`perf/RESULTS.md`, one section per scenario, which the site's results page includes
when it is built (docs/results.md), so that page cannot drift from the file."""

from __future__ import annotations

from pathlib import Path

PERF = Path(__file__).resolve().parents[1]
RESULTS_MD = PERF / "RESULTS.md"


def output(scenario: str) -> Path:
    """The folder of one scenario's raw output (made by whoever writes to it)."""
    return PERF / "out" / scenario
