"""`lilac-serve keys` and `usage` as a new user runs them: in an empty HOME with no
LILAC_* variables the data directory is made on first use; LILAC_DATA_DIR and
LILAC_DATABASE_URL are read by every command, as by `serve`; flags still win."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

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


def test_every_command_reads_the_data_directory_from_the_environment(tmp_path: Path) -> None:
    home, data, other = tmp_path / "home", tmp_path / "a" / "b", tmp_path / "flag"
    home.mkdir()
    env = empty_home_env(home, LILAC_DATA_DIR=str(data))
    assert lilac(env, "keys", "create", "--name", "env-key").returncode == 0
    assert (data / "lilac.db").is_file()
    assert not (home / ".local").exists()
    assert " env-key " in lilac(env, "keys", "list").stdout
    assert lilac(env, "usage", "--format", "json").returncode == 0
    # A flag wins over the environment.
    flagged = lilac(env, "keys", "create", "--name", "flag-key", "--data-dir", str(other))
    assert flagged.returncode == 0
    assert " flag-key " not in lilac(env, "keys", "list").stdout
    # LILAC_DATABASE_URL names the database itself.
    by_url = empty_home_env(home, LILAC_DATABASE_URL=f"sqlite:///{other}/lilac.db")
    assert " flag-key " in lilac(by_url, "keys", "list").stdout
    # `serve --auth keys` finds the keys the same way (it stops at the check, exit 2,
    # only when the database is missing).
    nowhere = empty_home_env(home, LILAC_DATA_DIR=str(tmp_path / "none"))
    missing = lilac(nowhere, "serve", "--auth", "keys")
    assert missing.returncode == 2 and "no keys database" in missing.stderr


def test_an_explicit_database_in_a_missing_folder_is_still_an_error(tmp_path: Path) -> None:
    env = empty_home_env(tmp_path)
    url = f"sqlite:///{tmp_path}/typo/lilac.db"
    result = lilac(env, "keys", "list", "--database-url", url)
    assert result.returncode == 1 and "does not exist" in result.stderr
