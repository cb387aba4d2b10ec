"""The architecture page's layout tree names every package of `app/` and `engine/`,
folder for folder, at its depth: a package added, moved or renamed without the page
fails here."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "architecture.md"
# Alembic's revisions and script folder: data of the tenancy package, not code to find.
NOT_PACKAGES = {"app/db/migrations"}


def packages() -> set[str]:
    """Every folder under app/ and engine/ that is a package, as a path from the root."""
    found = set()
    for top in ("app", "engine"):
        for init in (ROOT / top).rglob("__init__.py"):
            folder = init.parent.relative_to(ROOT).as_posix()
            if folder != top and not any(folder.startswith(n) for n in NOT_PACKAGES):
                found.add(folder)
    return found


def tree_folders() -> set[str]:
    """The folders under app/ and engine/ the page's layout block names (`name/` at an
    indent of two spaces a level; a line may name several, as `chat/, completions/`), as
    paths from the root."""
    block = PAGE.read_text().split("## Layout", 1)[1].split("```text", 1)[1].split("```", 1)[0]
    named: set[str] = set()
    parents: list[str] = []
    for line in block.splitlines():
        match = re.match(r"^( *)((?:[\w.]+/(?:, )?)+)(?: |$)", line)
        if match is None:
            continue
        depth = len(match.group(1)) // 2
        names = [n.rstrip("/") for n in match.group(2).split(", ")]
        parents = parents[:depth]
        for name in names:
            named.add("/".join([*parents, name]))
        parents.append(names[0])
    return {f for f in named if f.startswith(("app/", "engine/"))}


def test_the_tree_names_every_package() -> None:
    missing = sorted(packages() - tree_folders())
    assert missing == [], f"docs/architecture.md's layout lacks {missing}"


def test_the_tree_names_no_folder_that_is_gone() -> None:
    gone = sorted(f for f in tree_folders() if not (ROOT / f).is_dir())
    assert gone == [], f"docs/architecture.md's layout names {gone}, which do not exist"
