"""The `lilac-serve` command: `serve` (the default), `prepare-model`, `keys`, `usage` and
`prices`."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any

import msgspec

from app.config.settings import Settings
from app.config.sources import build_parser, settings_from


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="lilac-serve", description=__doc__)
    commands = parser.add_subparsers(dest="command")
    build_parser(commands.add_parser("serve", help="serve a model over HTTP (default)"))
    commands.add_parser("prepare-model", help="download and convert the default model")
    from app.tenancy.cli import add_commands

    add_commands(commands)
    if not argv or argv[0].startswith("-"):
        argv.insert(0, "serve")
    args = parser.parse_args(argv)
    if args.command == "prepare-model":
        return prepare_model()
    if args.command in ("keys", "usage", "prices"):
        from app.tenancy.cli import run

        return run(args)
    return serve(settings_from(args))


def prepare_model() -> int:
    from engine.checkpoint import ModelPreparationError, prepare_default_model

    try:
        prepare_default_model(progress=lambda line: print(line, flush=True))
    except ModelPreparationError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


def serve(settings: Settings) -> int:
    from granian import Granian
    from granian.constants import Interfaces, Loops
    from granian.log import LogLevels

    from app.observability import logs

    logs.configure(settings.log_format, settings.log_level)
    settings.resolved_admin_key()  # a missing or empty key file: said now, not later
    from app.launch.api_server_checks import refusal
    from app.launch.engine_process import refusal as engine_process_refusal
    from app.tenancy.cli import check_serve

    problem = check_serve(settings) or refusal(settings) or engine_process_refusal(settings)
    if problem is not None:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    from app.config.model_specs import model_specs

    if any(spec.model is None for spec in model_specs(settings)) and prepare_model() != 0:
        return 1
    # The worker reads its settings from here and removes them (and the admin key) from
    # its environment before the engine's processes start (app.launch.factory.forget_secrets).
    os.environ.pop("LILAC_ADMIN_KEY", None)

    def granian(workers: int) -> Any:  # a granian server (its class is not a type to mypy)
        from app.launch.api_server_launch import workers_kill_timeout_s

        return Granian(
            "app.launch.factory:app_from_environment",
            factory=True,
            address=settings.host,
            port=settings.port,
            interface=Interfaces.ASGI,
            # One worker loads its own engine; several share one (app.launch.api_server_launch).
            workers=workers,
            workers_kill_timeout=workers_kill_timeout_s(settings) if workers > 1 else None,
            loop=Loops.uvloop,
            log_level=LogLevels(settings.log_level),
        )

    if settings.api_server_count > 1:
        from app.launch.api_server_launch import serve_shared

        return serve_shared(settings, granian)
    os.environ["LILAC_SETTINGS_JSON"] = msgspec.json.encode(settings).decode()
    granian(1).serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
