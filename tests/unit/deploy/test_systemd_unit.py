"""deploy/lilac-serve.service: restarted on failure, serving with API keys from the
keys database in its state directory, the admin key from a credentials file (never the
command line or the environment), and that file read by the server."""

import argparse
import configparser
import shlex
from pathlib import Path

from app.config.sources import build_parser, settings_from
from app.tenancy.service import auth_mode, database_url

UNIT = Path(__file__).resolve().parents[3] / "deploy" / "lilac-serve.service"


def unit() -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # keep systemd's case
    parser.read_string(UNIT.read_text())
    return parser


def test_the_unit_restarts_a_failed_server() -> None:
    service = unit()["Service"]
    assert service["Restart"] == "on-failure"
    assert service["KillSignal"] == "SIGTERM"
    # SIGTERM to the main process alone, which drains before the engine stops.
    assert service["KillMode"] == "mixed"
    assert int(service["TimeoutStopSec"]) > 30  # longer than the default grace period


def test_the_admin_key_comes_from_a_credential_file() -> None:
    service = unit()["Service"]
    assert service["LoadCredential"].startswith("lilac.toml:")
    exec_start = service["ExecStart"]
    assert "--config %d/lilac.toml" in exec_start
    assert "admin" not in exec_start.lower()
    assert "LILAC_ADMIN_KEY" not in UNIT.read_text()


def test_the_credential_file_sets_the_admin_key(tmp_path: Path) -> None:
    config = tmp_path / "lilac.toml"
    config.write_text('[admission]\nadmin_key = "s3cret"\n')
    args = build_parser(argparse.ArgumentParser()).parse_args(["--config", str(config)])
    assert settings_from(args, {}).admin_key == "s3cret"


def test_the_unit_serves_with_keys_from_its_state_directory(tmp_path: Path) -> None:
    service = unit()["Service"]
    argv = shlex.split(service["ExecStart"])
    assert argv[0].endswith("/lilac-serve") and argv[1] == "serve"
    config = tmp_path / "lilac.toml"
    config.write_text('[admission]\nadmin_key = "s3cret"\n')
    argv = [str(config) if a == "%d/lilac.toml" else a for a in argv[2:]]
    settings = settings_from(build_parser(argparse.ArgumentParser()).parse_args(argv), {})
    assert auth_mode(settings) == "keys"
    # The database lives where systemd keeps the service's state (StateDirectory=).
    assert settings.data_dir == f"/var/lib/{service['StateDirectory']}"
    assert database_url(settings) == f"sqlite:////var/lib/{service['StateDirectory']}/lilac.db"
    assert settings.resolved_admin_key() == "s3cret"
