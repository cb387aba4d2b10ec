"""`lilac-serve keys` and `usage` as a new user runs them: in an empty HOME with no
LILAC_* variables the data directory is made on first use; LILAC_DATA_DIR and
LILAC_DATABASE_URL are read by every command, as by `serve`; flags still win."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.launch.cli import main

LILAC = str(Path(sys.executable).with_name("lilac-serve"))


def empty_home_env(home: Path, **extra: str) -> dict[str, str]:
    """The environment with HOME replaced and every LILAC_* variable gone."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LILAC_")}
    return {**env, "HOME": str(home), **extra}


def lilac(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [LILAC, *args], env=env, capture_output=True, text=True, timeout=120, check=False
    )


def test_the_first_key_on_a_fresh_machine_makes_the_data_directory(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = empty_home_env(home)
    made = lilac(env, "keys", "create", "--name", "acme")
    assert made.returncode == 0, made.stderr
    assert made.stdout.strip().startswith("lilac-sk-")
    data = home / ".local" / "share" / "lilac-serve"
    assert (data / "lilac.db").is_file()
    assert data.stat().st_mode & 0o077 == 0  # private to the user
    listed = lilac(env, "keys", "list")
    assert listed.returncode == 0 and " acme " in listed.stdout
    report = lilac(env, "usage", "--by", "key")
    assert report.returncode == 0, report.stderr


def test_every_command_reads_the_data_directory_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """In-process (the commands as `main` runs them), with the environment replaced."""
    home, data, other = tmp_path / "home", tmp_path / "a" / "b", tmp_path / "flag"
    home.mkdir()
    for name in [k for k in os.environ if k.startswith("LILAC_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("LILAC_DATA_DIR", str(data))

    def listed() -> str:
        assert main(["keys", "list"]) == 0
        return capsys.readouterr().out

    assert main(["keys", "create", "--name", "env-key"]) == 0
    assert (data / "lilac.db").is_file()
    assert not (home / ".local").exists()
    assert " env-key " in listed()
    assert main(["usage", "--format", "json"]) == 0
    # A flag wins over the environment.
    assert main(["keys", "create", "--name", "flag-key", "--data-dir", str(other)]) == 0
    assert " flag-key " not in listed()
    # LILAC_DATABASE_URL names the database itself.
    monkeypatch.setenv("LILAC_DATABASE_URL", f"sqlite:///{other}/lilac.db")
    assert " flag-key " in listed()
    # `serve --auth keys` finds the keys the same way: exit 2 only when they are missing.
    monkeypatch.delenv("LILAC_DATABASE_URL")
    monkeypatch.setenv("LILAC_DATA_DIR", str(tmp_path / "none"))
    capsys.readouterr()
    assert main(["serve", "--auth", "keys"]) == 2
    assert "no keys database" in capsys.readouterr().err


def test_an_explicit_database_in_a_missing_folder_is_still_an_error(tmp_path: Path) -> None:
    env = empty_home_env(tmp_path)
    url = f"sqlite:///{tmp_path}/typo/lilac.db"
    result = lilac(env, "keys", "list", "--database-url", url)
    assert result.returncode == 1 and "does not exist" in result.stderr
