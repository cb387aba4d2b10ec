"""`--engine-frontend-process`: what it cannot do yet is refused at start, with the flags
that ask for it; otherwise the served engine is a RemoteEngine."""

from __future__ import annotations

import pytest

from app.cli import main
from app.engine_process import refusal
from app.settings import Settings


def test_off_or_alone_is_fine() -> None:
    assert refusal(Settings()) is None
    assert refusal(Settings(engine_frontend_process=True)) is None


def test_several_api_servers_are_refused() -> None:
    problem = refusal(Settings(engine_frontend_process=True, api_server_count=2))
    assert problem is not None and "--api-server-count" in problem


def test_several_models_are_refused() -> None:
    problem = refusal(Settings(engine_frontend_process=True, model=("a", "b")))
    assert problem is not None and "one model" in problem


def test_the_command_refuses_before_loading(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["serve", "--engine-frontend-process", "true", "--model", "a", "--model", "b"])
    assert code == 2
    assert "--engine-frontend-process true serves one model" in capsys.readouterr().err


def test_the_served_engine_is_remote() -> None:
    from app.served_models import build_engine
    from engine.remote.client import RemoteEngine

    engine = build_engine(Settings(engine_frontend_process=True, cpu_kvcache_space_gib=1))
    assert isinstance(engine, RemoteEngine)
