import argparse

import pytest

from app.config.settings import Settings
from app.config.sources import build_parser, settings_from


def parse(argv: list[str], environ: dict[str, str]) -> Settings:
    args = build_parser(argparse.ArgumentParser()).parse_args(argv)
    return settings_from(args, environ)


def test_defaults() -> None:
    settings = parse([], {})
    assert (settings.host, settings.port, settings.model) == ("127.0.0.1", 8000, ())


def test_environment_sets_every_flag_kind() -> None:
    settings = parse(
        [],
        {
            "LILAC_PORT": "9001",
            "LILAC_ENFORCE_EAGER": "false",
            "LILAC_GPU_MEMORY_UTILIZATION": "0.5",
            "LILAC_SERVED_MODEL_NAME": "a, b",
        },
    )
    assert settings.port == 9001
    assert settings.enforce_eager is False
    assert settings.gpu_memory_utilization == 0.5
    assert settings.served_model_name == ("a", "b")


def test_flag_wins_over_environment() -> None:
    assert parse(["--port", "7000"], {"LILAC_PORT": "9001"}).port == 7000


def test_bad_environment_value_exits_with_its_name() -> None:
    with pytest.raises(SystemExit, match="LILAC_PORT"):
        parse([], {"LILAC_PORT": "eighty"})


def test_family_from_flag_or_environment() -> None:
    assert parse([], {}).family is None
    assert parse([], {"LILAC_FAMILY": "glm45"}).family == "glm45"
    assert parse(["--family", "gemma4"], {"LILAC_FAMILY": "glm45"}).family == "gemma4"


def test_unknown_family_stops_before_loading() -> None:
    from app.launch.served_models import build_engine

    with pytest.raises(SystemExit, match="known families"):
        build_engine(Settings(model=("/nonexistent",), family="llama9"))
