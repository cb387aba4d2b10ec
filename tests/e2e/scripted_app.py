"""An app over the scripted engine for granian subprocess tests (no model needed)."""

from __future__ import annotations

import os

from litestar import Litestar

from app.main import create_app
from app.settings import Settings
from engine.scripted import ScriptedEngine


def build() -> Litestar:
    settings = Settings(grace_period=float(os.environ.get("TEST_GRACE_PERIOD", "1.0")))
    engine = ScriptedEngine(token_delay_s=0.05)
    return create_app(settings, engine=engine, handle_sigterm=True)
