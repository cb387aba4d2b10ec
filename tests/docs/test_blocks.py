"""Every fenced block of README.md and docs/ is of a kind the tests know: a command that
runs (tests/e2e/test_docs_examples.py), a config file or body that is checked here, or
output; a block that must not run says why. The README stays short, its links lead
somewhere, and every page of docs/ is in the site's navigation."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from app.config.model_specs import model_specs
from app.config.sources import settings_from
from tests.docs.blocks import ROOT, Block, all_blocks, parse, problems

BLOCKS = all_blocks()


def test_every_block_is_run_checked_shown_or_marked_with_a_reason() -> None:
    assert [found for block in BLOCKS for found in problems(block)] == []


def test_the_documentation_has_blocks_that_run() -> None:
    running = {block.path for block in BLOCKS if block.runs}
    assert {"README.md", "docs/getting-started.md", "docs/tenants.md"} <= running


def test_the_parser_reads_the_marker_right_above_a_fence() -> None:
    text = (
        "intro\n\n<!-- not run: needs a GPU -->\n```sh\nnvidia-smi\n```\n\n"
        "```python\nprint(1)\n```\n  ```sh\n  indented\n  ```\n"
    )
    marked, plain, indented = parse(text, "page.md")
    assert (marked.lang, marked.line, marked.text, marked.not_run) == (
        "sh", 4, "nvidia-smi\n", "needs a GPU",
    )  # fmt: skip
    assert (plain.lang, plain.not_run, plain.runs) == ("python", None, True)
    assert marked.runs is False
    assert indented.text == "indented\n"


def test_the_rules_catch_what_they_forbid() -> None:
    text = (
        "```\nno language\n```\n<!-- not run: -->\n```sh\nx\n```\n"
        "```console\n$ ls\n```\n<!-- not run: output -->\n```text\nout\n```\n"
    )
    found = [problem for block in parse(text, "p.md") for problem in problems(block)]
    assert len(found) == 4, found
    with pytest.raises(ValueError, match="never closed"):
        parse("```sh\nopen\n", "p.md")


@pytest.mark.parametrize(
    "block", [b for b in BLOCKS if b.lang == "toml"], ids=lambda block: block.id
)
def test_a_toml_block_is_a_config_the_server_reads(block: Block, tmp_path: Path) -> None:
    config = tmp_path / "lilac.toml"
    config.write_text(block.text)
    settings = settings_from(environ={"LILAC_CONFIG": str(config)})  # [admission], typed
    assert model_specs(settings)  # [[models]], each table checked


@pytest.mark.parametrize(
    "block", [b for b in BLOCKS if b.lang == "json"], ids=lambda block: block.id
)
def test_a_json_block_parses(block: Block) -> None:
    json.loads(block.text)


def test_the_readme_is_short_and_its_links_lead_somewhere() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) < 200
    targets = re.findall(r"\]\((?!https?://|#)([^)#]+)", readme)
    assert targets, "the README links into docs/"
    assert [t for t in targets if not (ROOT / t).exists()] == []


def _nav_pages(entries: list[object]) -> list[str]:
    pages = []
    for entry in entries:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        pages += _nav_pages(value) if isinstance(value, list) else [str(value)]
    return pages


def test_every_page_is_in_the_navigation() -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    pages = sorted(_nav_pages(config["nav"]))
    docs = ROOT / "docs"
    on_disk = sorted(str(p.relative_to(docs)) for p in docs.rglob("*.md") if "hooks" not in p.parts)
    assert pages == on_disk
