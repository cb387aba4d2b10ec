"""The documentation's flag tables are generated from the flag table (app.config.settings) when
the site is built (docs/hooks/generated.py): every flag, in order, with its environment
variable, default and meaning, in exactly one table of docs/configuration.md. No page
and not the README holds a hand-written copy that could drift."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from app.config.settings import SECTIONS
from app.config.sources import OPTIONS, markdown_table

ROOT = Path(__file__).resolve().parents[3]
HEADER = "| flag | environment | default | meaning |"
SOURCES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def generated() -> ModuleType:
    """The MkDocs hook, loaded by path as MkDocs loads it."""
    spec = importlib.util.spec_from_file_location("generated", ROOT / "docs/hooks/generated.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def flag_tables(text: str) -> list[list[list[str]]]:
    """Each flag table of a Markdown text, as rows of cells."""
    tables: list[list[list[str]]] = []
    rows: list[list[str]] | None = None
    for line in [*text.splitlines(), ""]:
        if rows is not None:
            if line.startswith("|"):
                rows.append([cell.strip() for cell in line.strip().strip("|").split(" | ")])
                continue
            tables.append(rows[1:])  # without the | --- | line
            rows = None
        if line.strip() == HEADER:
            rows = []
    return tables


def expected_rows(section: str) -> list[list[str]]:
    lines = markdown_table(section)[2:]
    return [[cell.strip() for cell in line.strip("|").split(" | ")] for line in lines]


def test_no_page_holds_a_hand_written_flag_table() -> None:
    # A flag is documented by its Flag(help=...) in app/settings*.py; the site renders it.
    written = [str(path.relative_to(ROOT)) for path in SOURCES if HEADER in path.read_text()]
    assert written == []


def test_configuration_asks_for_each_section_once() -> None:
    text = (ROOT / "docs/configuration.md").read_text()
    for section in SECTIONS:
        assert text.count(f"<!-- flags: {section} -->") == 1, section


@pytest.mark.parametrize("section", sorted(SECTIONS))
def test_the_rendered_table_is_the_flag_table(section: str) -> None:
    rendered = generated().render(f"before\n\n<!-- flags: {section} -->\n\nafter\n")
    assert flag_tables(rendered) == [expected_rows(section)]


def test_every_flag_is_in_one_rendered_table() -> None:
    render = generated().render
    listed = [
        row[0]
        for path in SOURCES
        for table in flag_tables(render(path.read_text()))
        for row in table
    ]
    assert sorted(listed) == sorted(f"`{option.flag}`" for option in OPTIONS)


def test_an_unknown_section_fails_the_build() -> None:
    with pytest.raises(ValueError, match="unknown flag section"):
        generated().render("<!-- flags: nonsense -->\n")


def test_parser_reads_a_table_and_catches_a_wrong_default() -> None:
    text = "## Configuration\n\n" + "\n".join(markdown_table("server")) + "\n\nafter\n"
    assert flag_tables(text) == [expected_rows("server")]
    wrong = text.replace("| `8000` |", "| `8080` |")
    assert flag_tables(wrong) != [expected_rows("server")]
