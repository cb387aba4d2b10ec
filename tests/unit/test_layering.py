"""The arrows of the layout: `app` never imports vLLM, only `engine.vllm_backend` does,
`engine` never imports `app`, and the admission controller and the warm-model pool
import neither vLLM nor the web stack (they run on GPU machines that have neither); no
module of `app` or `engine` imports itself around a circle, type-only imports included
(the layers themselves are import-linter's contracts in pyproject.toml, in `make lint`)."""

from __future__ import annotations

import ast
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[2]
WEB_STACK = ("litestar", "granian", "msgspec", "httpx", "uvloop")


def imported_modules(path: Path) -> list[str]:
    """Every module a file imports, at module level or inside functions."""
    names = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return names


def sources(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def top(module: str) -> str:
    return module.split(".")[0]


def offenders(files: list[Path], banned: tuple[str, ...]) -> list[str]:
    return [
        f"{path.relative_to(ROOT)} imports {module}"
        for path in files
        for module in imported_modules(path)
        if top(module) in banned or module in banned
    ]


def test_vllm_is_imported_only_by_the_backend_package() -> None:
    backend = ROOT / "engine" / "vllm_backend"
    # The package itself, not a folder under it: vLLM stays in one place.
    files = [p for p in sources("app") + sources("engine") if p.parent != backend]
    assert offenders(files, ("vllm",)) == []


def test_backend_package_really_imports_vllm() -> None:
    """The check above is not vacuous: the backend is where vLLM lives."""
    assert offenders(sources("engine/vllm_backend"), ("vllm",))


def test_engine_never_imports_app() -> None:
    assert offenders(sources("engine"), ("app",)) == []


@pytest.mark.parametrize("banned", [("vllm",), WEB_STACK])
@pytest.mark.parametrize("package", ["engine/admission", "engine/warm"])
def test_admission_and_warm_models_import_neither_vllm_nor_the_web_stack(
    package: str, banned: tuple[str, ...]
) -> None:
    assert sources(package)
    assert offenders(sources(package), banned) == []


def test_detects_a_banned_import(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from vllm.config import VllmConfig\n")
    assert imported_modules(bad) == ["vllm.config"]


def import_cycles(*packages: str) -> list[list[str]]:
    """The groups of modules that import each other, directly or around a circle (type-only
    imports included): Tarjan's strongly connected components of the import graph."""
    graph = grimp.build_graph(*packages, exclude_type_checking_imports=False)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in graph.find_modules_directly_imported_by(module):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == module:
                    break
            if len(group) > 1:
                cycles.append(sorted(group))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return cycles


def test_no_module_imports_itself_around_a_circle() -> None:
    assert import_cycles("app", "engine") == []


def test_the_cycle_check_finds_a_circle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Not vacuous: two modules that import each other (one only for its types) are found."""
    package = tmp_path / "circle_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from circle_pkg import b\n")
    (package / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from circle_pkg import a\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert import_cycles("circle_pkg") == [["circle_pkg.a", "circle_pkg.b"]]
