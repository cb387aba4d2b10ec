"""An app over the scripted engine for granian subprocess tests (no model needed).

Settings come from `LILAC_SETTINGS_JSON` when set (as `lilac-serve serve` passes them),
else the defaults with `TEST_GRACE_PERIOD`. `LILAC_SCRIPTED_MODELS` (comma-separated)
names the models it serves (default: `scripted`)."""

from __future__ import annotations

import os

import msgspec
from litestar import Litestar

from app.main import create_app
from app.observability import logs
from app.settings import Settings
from engine.scripted import ScriptedEngine


def build() -> Litestar:
    raw = os.environ.get("LILAC_SETTINGS_JSON")
    if raw:
        settings = msgspec.json.decode(raw, type=Settings)
        logs.configure(settings.log_format, settings.log_level)
    else:
        settings = Settings(grace_period=float(os.environ.get("TEST_GRACE_PERIOD", "1.0")))
    names = os.environ.get("LILAC_SCRIPTED_MODELS")
    if names:
        engine = ScriptedEngine(token_delay_s=0.05, served_names=tuple(names.split(",")))
    else:
        engine = ScriptedEngine(token_delay_s=0.05)
    return create_app(settings, engine=engine, handle_sigterm=True)
