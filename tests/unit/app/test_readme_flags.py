"""The README's configuration tables say exactly what the flag table (app.settings) says:
every flag, in order, with its environment variable, default and meaning."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.settings import SECTIONS
from app.settings_sources import OPTIONS, markdown_table

README = Path(__file__).resolve().parents[3] / "README.md"
HEADER = "| flag | environment | default | meaning |"
# The README section ("## ...") that holds each flag table.
HEADINGS = {
    "server": "## Configuration",
    "admission": "## Admission controller",
    "tenants": "## Tenants",
}


def readme_flag_tables(text: str) -> dict[str, list[list[str]]]:
    """Each flag table of the README, by the `## ` heading above it, as rows of cells."""
    tables: dict[str, list[list[str]]] = {}
    heading, rows = "", None
    for line in [*text.splitlines(), ""]:
        if line.startswith("## "):
            heading = line.strip()
        if rows is not None:
            if line.startswith("|"):
                rows.append([cell.strip() for cell in line.strip().strip("|").split(" | ")])
                continue
            assert heading not in tables, f"two flag tables under {heading!r}"
            tables[heading] = rows[1:]  # without the | --- | line
            rows = None
        if line.strip() == HEADER:
            rows = []
    return tables


def expected_rows(section: str) -> list[list[str]]:
    lines = markdown_table(section)[2:]
    return [[cell.strip() for cell in line.strip("|").split(" | ")] for line in lines]


def test_every_section_has_a_readme_heading() -> None:
    assert set(HEADINGS) == set(SECTIONS)


@pytest.mark.parametrize("section", sorted(SECTIONS))
def test_readme_table_matches_the_flag_table(section: str) -> None:
    tables = readme_flag_tables(README.read_text())
    assert HEADINGS[section] in tables, f"no flag table under {HEADINGS[section]!r}"
    readme = tables[HEADINGS[section]]
    expected = expected_rows(section)
    # One message per disagreeing flag (flag, environment, default, meaning), then the table
    # to paste into the README: `app.settings_sources.markdown_table(section)`.
    by_flag = {row[0]: row for row in readme}
    problems = []
    for row in expected:
        got = by_flag.get(row[0])
        if got is None:
            problems.append(f"{row[0]} is missing from the README")
        elif got != row:
            problems.append(f"{row[0]}: README has {got}, the flag table says {row}")
    known = {row[0] for row in expected}
    problems += [f"{flag} is in the README but not a flag here" for flag in by_flag.keys() - known]
    assert problems == [], "\n".join([*problems, "expected:", *markdown_table(section)])
    assert readme == expected  # and in the same order


def test_every_flag_is_in_one_readme_table() -> None:
    tables = readme_flag_tables(README.read_text())
    listed = [row[0] for heading in HEADINGS.values() for row in tables.get(heading, [])]
    assert sorted(listed) == sorted(f"`{option.flag}`" for option in OPTIONS)


def test_parser_reads_a_table_and_catches_a_wrong_default() -> None:
    text = "## Configuration\n\n" + "\n".join(markdown_table("server")) + "\n\nafter\n"
    assert readme_flag_tables(text)["## Configuration"] == expected_rows("server")
    wrong = text.replace("| `8000` |", "| `8080` |")
    assert readme_flag_tables(wrong)["## Configuration"] != expected_rows("server")
