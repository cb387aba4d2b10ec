"""Every `python -m perf ...` the documentation, the results file, the Makefile and the
suite's own docstrings tell a reader to run names a registered scenario, in the form
the entry point takes (`python -m perf NAME`, not a module path)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from perf.registry import SCENARIOS

ROOT = Path(__file__).resolve().parents[3]
SOURCES = sorted(
    {
        ROOT / "README.md",
        ROOT / "Makefile",
        ROOT / "perf" / "RESULTS.md",
        *(ROOT / "docs").rglob("*.md"),
        *(ROOT / "perf").rglob("*.py"),
    }
)
COMMAND = re.compile(r"python3? -m perf(\.[\w.]+)?(?: +([A-Za-z][\w-]*|--help|-h))?")


def commands(text: str) -> list[tuple[str, str]]:
    return [(match.group(1) or "", match.group(2) or "") for match in COMMAND.finditer(text)]


@pytest.mark.parametrize("path", SOURCES, ids=lambda path: str(path.relative_to(ROOT)))
def test_every_perf_command_names_a_scenario(path: Path) -> None:
    wrong = []
    for suffix, name in commands(path.read_text()):
        if suffix:  # `python -m perf.soak`: a module path, not the entry point
            wrong.append(f"python -m perf{suffix}")
        elif name not in {*SCENARIOS, "", "SCENARIO", "NAME", "--help", "-h"}:
            wrong.append(f"python -m perf {name}")
    assert not wrong, f"{path.relative_to(ROOT)}: {wrong}"


def test_the_check_finds_a_stale_command() -> None:
    assert commands("run `python -m perf.soak --plan short`") == [(".soak", "")]
    assert commands("python -m perf no-such") == [("", "no-such")]
