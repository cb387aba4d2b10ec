"""`lilac-serve keys ...`, `lilac-serve usage ...` and `lilac-serve prices ...`
(app.tenancy.prices.cli): the operator's side of tenants, straight on the database (the
server need not run); and the start-up check of `serve`."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any, cast

from app.config.settings import Settings
from app.config.sources import settings_from
from app.db.engine import DatabaseError, ensure_data_dir, open_database
from app.tenancy.keys.store import (
    CACHE_GROUP_CHARS,
    DEFAULT_RPM,
    DEFAULT_WEIGHT,
    KeyLimits,
    KeyNotFound,
    KeyRecord,
    KeyStore,
    LimitChanges,
    check_weight,
)
from app.tenancy.prices import cli as prices_cli
from app.tenancy.prices.seeds import parse_seeds
from app.tenancy.report import (
    FORMATS,
    GROUPS,
    parse_time,
    refusal_reasons,
    render,
    render_reasons,
    summarize,
)
from app.tenancy.service import AuthConfigError, auth_mode, database_url, static_keys


def _limit(text: str) -> int | None:
    """A limit: a number >= 0, or `none` (unlimited)."""
    if text.lower() in ("none", "unlimited"):
        return None
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError("a limit is >= 0 (0 refuses every request) or none")
    return value


def _models(text: str) -> tuple[str, ...] | None:
    if text.lower() in ("", "all", "none"):
        return None
    return tuple(name.strip() for name in text.split(",") if name.strip())


def _weight(text: str) -> float:
    """A key's weight: a number > 0, at most the keys' maximum."""
    try:
        return check_weight(float(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _cache_group(text: str) -> str | None:
    if text.lower() in ("", "none"):
        return None
    if len(text) > CACHE_GROUP_CHARS:
        raise argparse.ArgumentTypeError(f"a cache group is at most {CACHE_GROUP_CHARS} characters")
    return text


def _database_flags(parser: argparse.ArgumentParser) -> None:
    # Unset here: `_url` falls back to LILAC_DATABASE_URL / LILAC_DATA_DIR, as `serve` does.
    parser.add_argument(
        "--database-url", help="default: sqlite:/// lilac.db in --data-dir [LILAC_DATABASE_URL]"
    )
    parser.add_argument(
        "--data-dir", help=f"default: {Settings().data_dir}, made on first use [LILAC_DATA_DIR]"
    )


def _limit_flags(parser: argparse.ArgumentParser, defaults: bool) -> None:
    parser.add_argument(
        "--rpm",
        type=_limit,
        default=DEFAULT_RPM if defaults else argparse.SUPPRESS,
        help=f"requests per minute (default {DEFAULT_RPM}; none: unlimited)",
    )
    for flag, meaning in (
        ("--tpm", "tokens per minute (prompt + max_tokens reserved)"),
        ("--max-concurrent", "requests at once"),
    ):
        parser.add_argument(
            flag,
            type=_limit,
            default=None if defaults else argparse.SUPPRESS,
            help=f"{meaning} (default unlimited)",
        )
    parser.add_argument(
        "--priority",
        type=int,
        default=0 if defaults else argparse.SUPPRESS,
        help="admission priority tier: the best (lowest) priority its requests get",
    )
    parser.add_argument(
        "--weight",
        type=_weight,
        default=DEFAULT_WEIGHT if defaults else argparse.SUPPRESS,
        help="its share of the engine when other keys are busy too: weight 2 gets about "
        f"twice the service of weight 1 (default {DEFAULT_WEIGHT:g}; > 0)",
    )
    parser.add_argument(
        "--models",
        type=_models,
        default=None if defaults else argparse.SUPPRESS,
        help="comma-separated served names the key may use (default all)",
    )
    parser.add_argument(
        "--cache-group",
        type=_cache_group,
        default=None if defaults else argparse.SUPPRESS,
        help="keys of one group share the prefix cache (default: the key's own; none: clear)",
    )


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    keys = commands.add_parser("keys", help="create, list, update and revoke API keys")
    actions = keys.add_subparsers(dest="action", required=True)
    create = actions.add_parser("create", help="make a key; prints it once")
    create.add_argument("--name", required=True)
    _limit_flags(create, defaults=True)
    listing = actions.add_parser("list", help="every key with its limits")
    listing.add_argument("--format", choices=("table", "json"), default="table")
    revoke = actions.add_parser("revoke", help="stop a key (within a second everywhere)")
    revoke.add_argument("id")
    change = actions.add_parser("update", help="change a key's limits")
    change.add_argument("id")
    _limit_flags(change, defaults=False)
    for parser in (create, listing, revoke, change):
        _database_flags(parser)

    report = commands.add_parser("usage", help="usage by key, model, day or batch")
    report.add_argument("--since", help="from (a date, an ISO time or Unix seconds; UTC)")
    report.add_argument("--until", help="up to, not including")
    report.add_argument("--by", choices=tuple(GROUPS), default="key")
    report.add_argument("--format", choices=FORMATS, default="table")
    _database_flags(report)
    _currency_flag(report)
    for parser in prices_cli.add_command(commands):
        _database_flags(parser)
        _currency_flag(parser)


def _currency_flag(parser: argparse.ArgumentParser) -> None:
    # Unset here: `_currency` falls back to LILAC_CURRENCY, as `serve` does.
    parser.add_argument("--currency", help="the prices' currency (default USD) [LILAC_CURRENCY]")


def _currency(args: argparse.Namespace) -> str:
    return settings_from(argparse.Namespace(currency=args.currency)).currency


def _url(args: argparse.Namespace) -> str:
    """The database of a `keys` or `usage` command: the flags, else the environment, else
    the defaults, like `serve`. The data directory of the default file is made if missing
    (an explicit `--database-url` in a missing folder stays an error: likely a typo)."""
    given = argparse.Namespace(database_url=args.database_url, data_dir=args.data_dir)
    settings = settings_from(given)
    url = database_url(settings)
    if settings.database_url is None:
        ensure_data_dir(settings.data_dir)
    return url


def run(args: argparse.Namespace) -> int:
    handler: Callable[[argparse.Namespace], Awaitable[None]]
    handler = {"usage": _usage, "prices": _prices}.get(args.command, _keys)
    try:
        asyncio.run(handler(args))
    except (DatabaseError, KeyNotFound, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


def _when(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(seconds))


def _show(value: Any) -> str:
    return "-" if value is None else str(value)


def _key_table(records: list[KeyRecord]) -> str:
    header = ("id", "name", "created", "last used", "rpm", "tpm", "concurrent", "priority")
    rows = [(*header, "weight", "models", "revoked")]
    for r in records:
        limits = r.limits
        rows.append(
            (
                r.id,
                r.name,
                _when(r.created_at),
                _when(r.last_used_at),
                _show(limits.rpm),
                _show(limits.tpm),
                _show(limits.max_concurrent),
                str(limits.priority),
                f"{limits.weight:g}",
                ",".join(limits.models) if limits.models is not None else "all",
                _when(r.revoked_at),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows
    )


async def _keys(args: argparse.Namespace) -> None:
    engine = await open_database(_url(args))
    store = KeyStore(engine)
    try:
        if args.action == "create":
            limits = KeyLimits(
                rpm=args.rpm,
                tpm=args.tpm,
                max_concurrent=args.max_concurrent,
                priority=args.priority,
                models=args.models,
                weight=args.weight,
            )
            record, secret = await store.create(args.name, limits, cache_group=args.cache_group)
            print(f"created {record.id} ({record.name}); the key, shown only now:", file=sys.stderr)
            print(secret)
        elif args.action == "list":
            records = await store.list()
            if args.format == "json":
                print(json.dumps([r.public() for r in records], indent=2))
            else:
                print(_key_table(records))
        elif args.action == "revoke":
            record = await store.revoke(args.id)
            print(f"revoked {record.id} ({record.name})")
        else:
            fields = ("rpm", "tpm", "max_concurrent", "priority", "models", "weight")
            # The flags' parsers (`_limit_flags`) give each its `KeyLimits` type.
            changes = cast(LimitChanges, {f: getattr(args, f) for f in fields if hasattr(args, f)})
            group = {"cache_group": args.cache_group} if hasattr(args, "cache_group") else {}
            record = await store.update(args.id, changes, **group)
            print(json.dumps(record.public()))
    finally:
        await engine.dispose()


async def _usage(args: argparse.Namespace) -> None:
    engine = await open_database(_url(args))
    since, until = parse_time(args.since), parse_time(args.until)
    try:
        rows = await summarize(engine, args.by, since, until, _currency(args))
        reasons = await refusal_reasons(engine, since, until)
    finally:
        await engine.dispose()
    print(render(rows, args.by, args.format))
    if args.format == "table" and reasons:
        print(render_reasons(reasons))


async def _prices(args: argparse.Namespace) -> None:
    at = parse_time(getattr(args, "effective_from", None))
    await prices_cli.run(args, _url(args), _currency(args), at)


def check_serve(settings: Settings) -> str | None:
    """Before the server starts: the auth settings make sense, and with `--auth keys`
    the database exists, is usable and migrated. The error message, or None."""
    try:
        parse_seeds(settings.price)  # a bad --price is said before anything starts
        mode = auth_mode(settings)
        if mode == "static":
            if not static_keys(settings):
                return "--auth static needs --api-key KEY or --api-key-file FILE"
        elif mode == "keys":
            ensure_data_dir(settings.data_dir)  # the usage spool lives there
            engine = asyncio.run(open_database(database_url(settings), must_exist=True))
            asyncio.run(engine.dispose())
    except (AuthConfigError, DatabaseError, ValueError) as exc:
        return str(exc)
    return None
