"""`--engine-frontend-process`: `auto` (the default) runs the engine in a process of its
own where it applies (one model, one HTTP process) and in the HTTP process elsewhere,
without a word; `true` refuses at start what it cannot do; `false` keeps it in. With it,
the served engine is a RemoteEngine, built with vLLM's series as `--engine-metrics` says,
and `/metrics` appends the engine's series read from its process."""

from __future__ import annotations

import pickle

import pytest

from app.config.settings import Settings
from app.config.sources import parse_args
from app.launch.cli import main
from app.launch.engine_process import refusal, runs_apart
from engine.protocol import ModelInfo
from engine.remote.client import RemoteEngine
from tests.client import app_client
from tests.unit.engine.remote.test_client import engine_with_series


def test_auto_is_the_default_and_on_for_one_model_and_one_http_process() -> None:
    assert Settings().engine_frontend_process == "auto"
    assert parse_args([]).engine_frontend_process == "auto"
    assert runs_apart(Settings()) is True
    assert runs_apart(Settings(model=("a",))) is True


def test_auto_is_off_where_it_does_not_apply_and_refuses_nothing() -> None:
    for settings in (Settings(api_server_count=2), Settings(model=("a", "b"))):
        assert runs_apart(settings) is False
        assert refusal(settings) is None


def test_false_is_off_and_true_is_on() -> None:
    assert runs_apart(Settings(engine_frontend_process="false")) is False
    assert runs_apart(Settings(engine_frontend_process="true")) is True
    assert refusal(Settings(engine_frontend_process="true")) is None


def test_the_flag_reads_auto_and_booleans_alike_from_flags_and_environment() -> None:
    from app.config.sources import build_parser, settings_from

    def read(argv: list[str], environ: dict[str, str]) -> str:
        import argparse

        args = build_parser(argparse.ArgumentParser()).parse_args(argv)
        return settings_from(args, environ).engine_frontend_process

    assert read(["--engine-frontend-process", "true"], {}) == "true"
    assert read(["--engine-frontend-process"], {}) == "true"  # alone, as a boolean's
    assert read(["--engine-frontend-process", "off"], {}) == "false"
    assert read(["--engine-frontend-process", "AUTO"], {}) == "auto"
    assert read([], {"LILAC_ENGINE_FRONTEND_PROCESS": "0"}) == "false"
    assert read(["--engine-frontend-process", "yes"], {"LILAC_ENGINE_FRONTEND_PROCESS": "0"}) == (
        "true"
    )
    with pytest.raises(SystemExit, match="LILAC_ENGINE_FRONTEND_PROCESS"):
        read([], {"LILAC_ENGINE_FRONTEND_PROCESS": "sometimes"})


def test_a_bad_flag_value_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args(["--engine-frontend-process", "sometimes"])
    assert "expected `auto` or a boolean" in capsys.readouterr().err


def test_several_api_servers_are_refused_with_true() -> None:
    problem = refusal(Settings(engine_frontend_process="true", api_server_count=2))
    assert problem is not None and "--api-server-count" in problem


def test_several_models_are_refused_with_true() -> None:
    problem = refusal(Settings(engine_frontend_process="true", model=("a", "b")))
    assert problem is not None and "one model" in problem


def test_the_command_refuses_before_loading(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["serve", "--engine-frontend-process", "true", "--model", "a", "--model", "b"])
    assert code == 2
    assert "--engine-frontend-process true serves one model" in capsys.readouterr().err


def child_config(engine: object) -> object:
    """The EngineConfig a RemoteEngine's child builds its VLLMEngine from."""
    assert isinstance(engine, RemoteEngine)
    _, args, _ = pickle.loads(engine._boot)
    return args[0]


def test_the_served_engine_is_remote_by_default_with_vllms_series_as_configured() -> None:
    from app.launch.served_models import build_engine, build_pool

    on = build_engine(parse_args(["--cpu-kvcache-space-gib", "1"]))
    assert child_config(on).prometheus_stats is True  # type: ignore[attr-defined]
    off_settings = parse_args(["--cpu-kvcache-space-gib", "1", "--engine-metrics", "false"])
    off = build_pool(off_settings).first.engine
    assert child_config(off).prometheus_stats is False  # type: ignore[attr-defined]


def test_false_and_several_models_keep_the_engine_in_process() -> None:
    from app.launch.served_models import build_engine, build_pool
    from engine.vllm_backend.engine import VLLMEngine

    kv = ["--cpu-kvcache-space-gib", "1"]
    assert isinstance(
        build_engine(parse_args([*kv, "--engine-frontend-process", "false"])), VLLMEngine
    )
    pool = build_pool(parse_args([*kv, "--model", "/nowhere/a", "--model", "/nowhere/b"]))
    assert all(isinstance(model.engine, VLLMEngine) for model in pool.models)


async def test_metrics_append_the_series_of_the_engines_process() -> None:
    placeholder = ModelInfo(("scripted",), 0, 0, "scripted")
    remote = RemoteEngine(placeholder, engine_with_series, tokens=["a"])
    await remote.start()  # the client runs no lifespan: the engine is ours to start
    try:
        async with app_client(remote, timeout=30) as http:
            text = (await http.get("/metrics")).text
    finally:
        await remote.shutdown()
    assert text.count("# TYPE vllm:scripted_steps_total counter") == 1
    assert 'vllm:scripted_steps_total{model_name="scripted"} 3.0' in text
    assert "lilac_engine_ready 1.0" in text
    assert "child_only_things" not in text
    # The child's process and Python collectors stay there: no family twice.
    types = [line for line in text.splitlines() if line.startswith("# TYPE ")]
    assert len(types) == len(set(types))
