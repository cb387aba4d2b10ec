"""The wheel works on its own: built from the sources, installed into a fresh virtual
environment, imported from there (not from this checkout): every family's chat template
renders from the installed `templates` package, and `lilac-serve --help` runs.

Builds offline with the running interpreter's setuptools (`pip wheel --no-build-isolation
--no-index`); the fresh environment sees this environment's site-packages for the
dependencies through a `.pth` path line, which adds the folder to sys.path without
running the `.pth` files inside it (so not the editable install's finder). About 20-40 s.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from engine.families import FAMILIES, get, resolve
from engine.templates import load_template_file, render_chat

pytestmark = pytest.mark.build

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ["pyproject.toml", "README.md", "app", "engine", "templates"]
MESSAGES = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "hi"},
    {"role": "assistant", "content": "hello"},
    {"role": "user", "content": "and now?"},
]
SPECIAL = {"bos_token": "<bos>", "eos_token": "<eos>"}

RENDER_EVERY_FAMILY = f"""
import json, sys
import app, engine, templates
from engine.families import FAMILIES, get, resolve
from engine.templates import load_template_file, render_chat

rendered = {{}}
for name in sorted(FAMILIES):
    variables, _ = resolve(get(name), {{}}, {{}})
    rendered[name] = render_chat(
        load_template_file(get(name).template), {MESSAGES!r},
        special_tokens={SPECIAL!r}, template_kwargs=variables,
    )
modules = {{m.__name__: m.__file__ for m in (app, engine, templates)}}
json.dump({{"modules": modules, "rendered": rendered}}, sys.stdout)
"""


def clean_environment() -> dict[str, str]:
    """No PYTHONPATH (the tests run with the checkout on it), no active virtualenv."""
    drop = {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP"}
    return {key: value for key, value in os.environ.items() if key not in drop}


def run(command: list[str], cwd: Path, timeout: float = 120) -> str:
    done = subprocess.run(
        command, cwd=cwd, env=clean_environment(), capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, f"{command} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtual environment with the wheel installed; its bin/ folder."""
    base = tmp_path_factory.mktemp("wheel")
    source = base / "src"  # a copy: an in-tree build would leave build/ and *.egg-info here
    source.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, source / name, ignore=ignore)
        else:
            shutil.copy2(ROOT / name, source / name)
    dist = base / "dist"
    run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
         "--no-index", "--quiet", "-w", str(dist), str(source)],
        cwd=base,
    )  # fmt: skip
    (wheel,) = dist.glob("lilac_serve-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    for family in FAMILIES.values():
        assert f"templates/{family.template}.jinja" in names
    assert "templates/__init__.py" in names
    assert not {name.split("/")[0] for name in names} & {"tests", "perf", "deploy"}

    venv = base / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=base)
    python = venv / "bin" / "python"
    run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
         "--no-index", "--quiet", str(wheel)],
        cwd=base,
    )  # fmt: skip
    site = Path(
        run([str(python), "-I", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            cwd=base).strip()
    )  # fmt: skip
    # The dependencies (jinja2, msgspec, ...) from this environment: a path line only.
    (site / "_lilac_test_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return venv / "bin"


def test_installed_package_renders_every_family_template(installed: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = run([str(installed / "python"), "-I", "-c", RENDER_EVERY_FAMILY], cwd=elsewhere)
    result = json.loads(out)
    site = installed.parent.resolve()
    for name, path in result["modules"].items():
        assert Path(path).resolve().is_relative_to(site), f"{name} imported from {path}"
    assert sorted(result["rendered"]) == sorted(FAMILIES)
    for name, text in result["rendered"].items():
        variables, _ = resolve(get(name), {}, {})
        here = render_chat(
            load_template_file(get(name).template),
            MESSAGES,
            special_tokens=SPECIAL,
            template_kwargs=variables,
        )
        assert text == here, name
        assert "and now?" in text


def test_console_script_runs_from_another_directory(installed: Path, tmp_path: Path) -> None:
    out = run([str(installed / "lilac-serve"), "--help"], cwd=tmp_path)  # serve's help
    assert "usage: lilac-serve serve" in out
    assert "[LILAC_PORT]" in out and "--grace-period" in out
