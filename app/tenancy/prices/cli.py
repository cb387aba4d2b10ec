"""`lilac-serve prices set` and `prices list`: the models' prices, straight on the
database (the server need not run; every replica reads a change within seconds).
Prices are given in units of the currency per million tokens (`--input 0.70`) and kept
exactly, in micro-units."""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from app.db.engine import open_database
from app.tenancy.prices.money import DEFAULT_BATCH_DISCOUNT, Price, micros, public, units
from app.tenancy.prices.store import PriceStore

HEADER = ("model", "input", "cached_input", "output", "batch_discount", "from")


def _amount(text: str) -> int:
    try:
        return micros(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _percent(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 100:
        raise argparse.ArgumentTypeError("a discount is a whole percent from 0 to 100")
    return value


def add_command(commands: Any) -> list[argparse.ArgumentParser]:
    """The `prices` command; its subcommands' parsers (for the database flags)."""
    prices = commands.add_parser("prices", help="set and list the models' prices")
    actions = prices.add_subparsers(dest="action", required=True)
    change = actions.add_parser("set", help="a model's price per million tokens, from now")
    change.add_argument("model", help="the served model name, as requests name it")
    change.add_argument("--input", type=_amount, required=True, help="per million prompt tokens")
    change.add_argument(
        "--cached-input", type=_amount, help="per million cached prompt tokens (default: --input)"
    )
    change.add_argument("--output", type=_amount, required=True, help="per million output tokens")
    change.add_argument(
        "--batch-discount",
        type=_percent,
        default=DEFAULT_BATCH_DISCOUNT,
        help=f"percent off for batch lines (default {DEFAULT_BATCH_DISCOUNT})",
    )
    change.add_argument(
        "--from", dest="effective_from", help="in force from (an ISO time or Unix seconds; now)"
    )
    listing = actions.add_parser("list", help="the prices in force now (--all: every change)")
    listing.add_argument("--all", action="store_true", help="every price, past and future")
    listing.add_argument("--format", choices=("table", "json"), default="table")
    return [change, listing]


def _table(rows: list[Price]) -> str:
    cells = [list(HEADER)] + [
        [
            p.model,
            units(p.input_micros),
            units(p.cached_input_micros),
            units(p.output_micros),
            str(p.batch_discount),
            time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(p.effective_from)),
        ]
        for p in rows
    ]
    widths = [max(len(row[i]) for row in cells) for i in range(len(HEADER))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells
    )


async def run(args: argparse.Namespace, url: str, currency: str, at: float | None) -> None:
    """One `prices` command on the database at `url`; `at`: `--from`, read."""
    engine = await open_database(url)
    store = PriceStore(engine)
    try:
        if args.action == "set":
            cached = args.cached_input if args.cached_input is not None else args.input
            price = await store.set_price(
                args.model, args.input, cached, args.output, args.batch_discount, at
            )
            print(json.dumps(public(price, currency)))
            return
        book = await store.reload()
        rows = book.all() if args.all else list(store.current().values())
        rows.sort(key=lambda p: (p.model, p.effective_from))
        if args.format == "json":
            print(json.dumps([public(p, currency) for p in rows], indent=2))
        else:
            print(f"per million tokens, in {currency}")
            print(_table(rows))
    finally:
        await engine.dispose()
