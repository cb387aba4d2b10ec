"""`python -m perf`: one entry point that lists every scenario, and each scenario's own
`--help` through it (cheap: argument parsing only, no engine, no server)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from perf.__main__ import summary
from perf.registry import KINDS, SCENARIOS

PERF = Path(__file__).resolve().parents[3] / "perf"
ROOT = PERF.parent


def _defines_main(path: Path) -> bool:
    tree = ast.parse(path.read_text())
    return any(isinstance(node, ast.FunctionDef) and node.name == "main" for node in tree.body)


def _module(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


def test_every_module_with_a_main_is_a_registered_scenario() -> None:
    """A command-line module that is not registered would be a tool of its own again."""
    with_main = {
        _module(path)
        for package in KINDS
        for path in (ROOT / package.replace(".", "/")).glob("*.py")
        if _defines_main(path)
    }
    assert with_main, "no scenario module found"
    assert with_main == set(SCENARIOS.values())


def test_no_module_runs_itself() -> None:
    """`python -m perf NAME` is the only way in: no `if __name__ == "__main__"` elsewhere."""
    own = [path for path in PERF.rglob("*.py") if "__main__" in path.read_text()]
    assert own == [PERF / "__main__.py"]


def test_the_registry_is_sorted_and_every_kind_has_a_scenario() -> None:
    assert list(SCENARIOS) == sorted(SCENARIOS)
    for package in KINDS:
        assert any(module.startswith(package + ".") for module in SCENARIOS.values()), package


def test_perf_never_imports_tests() -> None:
    """The import direction is one-way: tests use perf's harness, perf never uses tests."""
    offenders = []
    for path in PERF.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            offenders += [f"{path}: {n}" for n in names if n.split(".")[0] == "tests"]
    assert not offenders


def test_help_lists_every_scenario_with_its_summary() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "perf", "--help"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
    )
    lines = result.stdout.splitlines()
    assert lines[0].startswith("usage: python -m perf SCENARIO")
    for name, module in SCENARIOS.items():
        assert any(line.split()[:1] == [name] and summary(module) in line for line in lines), name
    for heading in KINDS.values():
        assert f"{heading}:" in lines


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_each_summary_is_one_short_line(name: str) -> None:
    text = summary(SCENARIOS[name])
    assert text and "\n" not in text and len(text) <= 90, text


def test_an_unknown_scenario_exits_2_with_the_list() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "perf", "no-such-scenario"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert result.returncode == 2
    assert "unknown scenario 'no-such-scenario'" in result.stderr
    assert "soak" in result.stderr


# Every scenario's --help, in one child process (a scenario may patch what it imports).
HELP_ALL = """
import contextlib, io, json, sys
from perf.__main__ import main
from perf.registry import SCENARIOS
results = {}
for name in SCENARIOS:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            code = main([name, "--help"])
        except SystemExit as exit:
            code = exit.code
    results[name] = {"code": code, "out": out.getvalue()}
print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def helps() -> dict[str, Any]:
    result = subprocess.run(
        [sys.executable, "-c", HELP_ALL], capture_output=True, text=True, cwd=ROOT, timeout=300
    )
    assert result.returncode == 0, result.stderr[-4000:]
    parsed: dict[str, Any] = json.loads(result.stdout.splitlines()[-1])
    return parsed


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_each_scenario_help_works(name: str, helps: dict[str, Any]) -> None:
    answer = helps[name]
    assert answer["code"] in (0, None), answer
    assert answer["out"].startswith("usage: "), answer["out"][:500]
    if name != "no-admission":  # its arguments are `lilac-serve serve`'s, and so is its usage
        assert answer["out"].startswith(f"usage: python -m perf {name}"), answer["out"][:200]


def test_subprocesses_start_scenarios_through_the_entry_point() -> None:
    """A module has no `__main__` block, so `python -m perf.x.y` would run nothing."""
    sources = [*PERF.rglob("*.py"), *(ROOT / "tests").rglob("*.py")]
    stale = [str(p) for p in sources if '"-m", "perf.' in p.read_text() and p != Path(__file__)]
    assert not stale
