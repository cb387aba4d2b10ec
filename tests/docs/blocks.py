"""The fenced blocks of the documentation (README.md and docs/), read the way a reader
meets them: in order, with the language and the `<!-- not run: REASON -->` marker that
may stand on the line right above a block.

What each language means:

- `sh`, `bash`, `python`: a command or a program the reader is told to run. Every one
  runs in the test suite (tests/e2e/test_docs_examples.py) unless it is marked not run.
- `toml`: a config file; parsed and checked as `--config` reads it.
- `json`: a body or a log line; must parse.
- `text`, `http`: output, shown, not run.
- `console`: a terminal session with its output; must be marked not run (its commands
  cannot be told from its output).

A block with no language, or another one, is an error: the tests cannot know whether it
is meant to run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUN = frozenset({"sh", "bash", "python"})
CHECKED = frozenset({"toml", "json"})
SHOWN = frozenset({"text", "http"})
MARKED_ONLY = frozenset({"console"})
LANGUAGES = RUN | CHECKED | SHOWN | MARKED_ONLY

FENCE = re.compile(r"^(?P<indent> *)(?P<fence>```+)(?P<lang>[^\s`]*)\s*$")
NOT_RUN = re.compile(r"^\s*<!-- not run:(?P<reason>.*?)-->\s*$")


@dataclass(frozen=True)
class Block:
    path: str  # relative to the repository root
    line: int  # of the opening fence, 1-based
    lang: str
    text: str
    not_run: str | None  # the reason, when marked

    @property
    def id(self) -> str:
        return f"{self.path}:{self.line}"

    @property
    def runs(self) -> bool:
        return self.lang in RUN and self.not_run is None


def documents() -> list[Path]:
    """README.md, then every page of docs/, in a stable order."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def parse(text: str, path: str) -> list[Block]:
    """Every fenced block of one Markdown text. An unclosed fence is an error."""
    blocks: list[Block] = []
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        match = FENCE.match(lines[index])
        if match is None:
            index += 1
            continue
        start, indent, fence = index, len(match["indent"]), match["fence"]
        above = NOT_RUN.match(lines[start - 1]) if start > 0 else None
        body: list[str] = []
        index += 1
        while index < len(lines) and lines[index].strip() != fence:
            body.append(lines[index][indent:] if lines[index][:indent].isspace() else lines[index])
            index += 1
        if index == len(lines):
            raise ValueError(f"{path}:{start + 1}: the fence is never closed")
        blocks.append(
            Block(
                path=path,
                line=start + 1,
                lang=match["lang"],
                text="\n".join(body) + "\n",
                not_run=above["reason"].strip() if above else None,
            )
        )
        index += 1
    return blocks


def all_blocks() -> list[Block]:
    return [
        block
        for document in documents()
        for block in parse(document.read_text(), str(document.relative_to(ROOT)))
    ]


def problems(block: Block) -> list[str]:
    """Why a block breaks the rules above; empty when it keeps them."""
    found = []
    if block.lang not in LANGUAGES:
        found.append(f"{block.id}: language {block.lang!r} is none of {sorted(LANGUAGES)}")
    if block.not_run is not None and not block.not_run:
        found.append(f"{block.id}: a `not run` marker without its reason")
    if block.not_run is not None and block.lang not in RUN | MARKED_ONLY:
        found.append(f"{block.id}: marked not run, but a {block.lang!r} block never runs")
    if block.lang in MARKED_ONLY and block.not_run is None:
        found.append(f"{block.id}: a {block.lang!r} block must be marked not run, or be `sh`")
    return found
