"""The arrows of the layout: `app` never imports vLLM, only `engine.vllm_backend` does,
`engine` never imports `app`, and the admission controller and the warm-model pool
import neither vLLM nor the web stack (they run on GPU machines that have neither)."""

from __future__ import annotations

import ast
from pathlib import Path

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
    files = [p for p in sources("app") + sources("engine") if backend not in p.parents]
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
