"""The app granian's worker serves: settings from the environment, then either one of
`--api-server-count`'s frontends (app.launch.api_servers) or the whole app (app.main)."""

from __future__ import annotations

import os

import msgspec
from litestar import Litestar

from app.config.settings import Settings
from app.launch import api_servers
from app.main import create_app
from app.observability import logs


def app_from_environment() -> Litestar:
    """Factory for granian's worker: settings travel as JSON in LILAC_SETTINGS_JSON."""
    raw = os.environ.get("LILAC_SETTINGS_JSON")
    settings = msgspec.json.decode(raw, type=Settings) if raw else Settings()
    logs.configure(settings.log_format, settings.log_level)
    forget_secrets()
    shared = api_servers.from_environment()
    if shared is not None:  # one of `--api-server-count` frontends (app.launch.api_servers)
        return api_servers.frontend_app(settings, shared)
    return create_app(settings, handle_sigterm=True, exit_on_engine_death=True)


# Environment variables that may carry a secret: the engine's processes, started from
# this one, must not inherit them.
SECRET_VARIABLES = ("LILAC_SETTINGS_JSON", "LILAC_ADMIN_KEY")


def forget_secrets() -> None:
    """Remove secrets from this process's environment once the settings are read."""
    for name in SECRET_VARIABLES:
        os.environ.pop(name, None)
