"""Admission settings: flags, environment, the [admission] table of --config, policy."""

import argparse
from pathlib import Path

import pytest

from app.config.settings import Settings
from app.config.sources import build_parser, settings_from
from app.services.generation.admission import policy_from


def parse(argv: list[str], environ: dict[str, str]) -> Settings:
    args = build_parser(argparse.ArgumentParser()).parse_args(argv)
    return settings_from(args, environ)


def test_defaults_give_the_documented_policy() -> None:
    policy = policy_from(parse([], {}))
    assert (policy.grace_s, policy.resume_after_s, policy.windows) == (30.0, 60.0, None)
    assert policy.release_memory is True


def test_toml_table_sits_below_environment_and_flags(tmp_path: Path) -> None:
    config = tmp_path / "lilac.toml"
    config.write_text(
        "[admission]\n"
        "grace_period = 12.5\n"
        "max-queued = 7\n"
        "resume_after = 5\n"
        'lending_windows = "mon-fri 19:00-07:00"\n'
        'lending_timezone = "Europe/Berlin"\n'
        "release_memory = false\n"
    )
    settings = parse(["--config", str(config), "--resume-after", "9"], {"LILAC_MAX_QUEUED": "3"})
    assert (settings.grace_period, settings.max_queued, settings.resume_after) == (12.5, 3, 9.0)
    policy = policy_from(settings)
    assert policy.windows is not None and policy.windows.timezone == "Europe/Berlin"
    assert policy.release_memory is False


def test_unknown_toml_key_is_an_error(tmp_path: Path) -> None:
    config = tmp_path / "lilac.toml"
    config.write_text("[admission]\ngrace = 3\n")
    with pytest.raises(SystemExit, match="unknown \\[admission\\] keys: grace"):
        parse(["--config", str(config)], {})


def test_bad_lending_window_exits_with_the_flag_name() -> None:
    with pytest.raises(SystemExit, match="--lending-windows"):
        policy_from(parse(["--lending-windows", "someday 10-11"], {}))


def test_admission_flags_from_environment() -> None:
    settings = parse([], {"LILAC_ADMIN_KEY": "k", "LILAC_RELEASE_MEMORY": "off"})
    assert (settings.admin_key, settings.release_memory) == ("k", False)
