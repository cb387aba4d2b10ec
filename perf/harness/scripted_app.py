"""Our app over the scripted engine (no model needed), served by granian as `lilac-serve`.

Two factories:

- `build`, for the tests: settings from `LILAC_SETTINGS_JSON` when set (as
  `lilac-serve serve` passes them), else the defaults with `TEST_GRACE_PERIOD`; tokens
  50 ms apart; `LILAC_SCRIPTED_MODELS` (comma-separated) names the models it serves
  (default: `scripted`);
- `create`, the frontend ceiling's server: tokens instantly, admission limits lifted.

    python -m perf scripted-app --port 8011 [--factory build] [--workers N]

With `--workers N`, granian runs N worker processes, each building the app and its own
scripted engine: what several frontend processes cost and deliver when no engine is
shared between them.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

import msgspec
from litestar import Litestar

from app.config.settings import Settings
from app.main import create_app
from app.observability import logs
from engine.scripted import ScriptedEngine

MODEL = "scripted"
# Short words, like a tokenizer's pieces; cycled when a request sets ignore_eos.
TOKENS = ("Hello", ",", " world", "!", " The", " quick", " brown", " fox")


# Admission limits out of the way: the ceiling measures the HTTP path, not the queue.
SETTINGS = Settings(max_concurrent=4096, max_queued=4096)


def build() -> Litestar:
    raw = os.environ.get("LILAC_SETTINGS_JSON")
    if raw:
        settings = msgspec.json.decode(raw, type=Settings)
        logs.configure(settings.log_format, settings.log_level)
    else:
        settings = Settings(grace_period=float(os.environ.get("TEST_GRACE_PERIOD", "1.0")))
    names = os.environ.get("LILAC_SCRIPTED_MODELS")
    served = tuple(names.split(",")) if names else ("scripted",)
    engine = ScriptedEngine(token_delay_s=0.05, served_names=served)
    return create_app(settings, engine=engine, handle_sigterm=True)


def create() -> Litestar:
    """With LILAC_BENCH_KEYS_DIR set: `--auth keys` on the SQLite database in that folder
    (its keys made beforehand), metering every request."""
    engine = ScriptedEngine(
        TOKENS, served_names=(MODEL,), max_model_len=1 << 20, keep_requests=False
    )
    keys_dir = os.environ.get("LILAC_BENCH_KEYS_DIR")
    if not keys_dir:
        return create_app(SETTINGS, engine=engine)
    from app.db.engine import create_engine
    from app.tenancy.service import Tenancy

    database = create_engine(f"sqlite:///{keys_dir}/lilac.db")
    tenancy = Tenancy.with_database(database, Path(keys_dir) / "spool.jsonl")
    return create_app(SETTINGS, engine=engine, tenancy=tenancy)


def _granian_option(text: str) -> tuple[str, Any]:
    from granian.constants import HTTPModes, RuntimeModes, TaskImpl

    name, value = text.split("=", 1)
    kinds: dict[str, Any] = {"task_impl": TaskImpl, "http": HTTPModes, "runtime_mode": RuntimeModes}
    if name in kinds:
        return name, kinds[name](value)
    return name, int(value) if value.isdigit() else value


def main(argv: list[str] | None = None) -> int:
    from granian import Granian
    from granian.constants import Interfaces, Loops

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8011)
    parser.add_argument("--factory", choices=("build", "create"), default="create")
    parser.add_argument(
        "--granian-opt",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="an extra Granian option to try (task_impl=rust, http=1, runtime_mode=st...)",
    )
    parser.add_argument("--workers", type=int, default=1, help="granian worker processes")
    args = parser.parse_args(argv)
    extra = dict(_granian_option(opt) for opt in args.granian_opt)
    Granian(  # the same options as app.launch.cli.serve, plus any tried here
        f"perf.harness.scripted_app:{args.factory}",
        factory=True,
        address=args.host,
        port=args.port,
        interface=Interfaces.ASGI,
        workers=args.workers,
        loop=Loops.uvloop,
        log_level="warning",
        **extra,
    ).serve()
    return 0
