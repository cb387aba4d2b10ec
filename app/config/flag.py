"""How one setting is declared: its `Flag` annotation (help text, documentation table,
where else it may be set) and the readers of flag text the declarations share.

The settings themselves are declared, a group a documentation table, in
`app.config.server`, `app.config.admission` and `app.config.tenants`;
`app.config.settings.Settings` stacks the groups into one object.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Flag:
    """The documentation of one setting; the setting's type and default are its field's."""

    help: str  # one line, Markdown: the documentation's "meaning" column and `--help`
    section: str = "server"  # the documentation's table the flag is listed in: a key of SECTIONS
    toml: bool = False  # also settable in the [admission] table of --config
    repeatable: bool = False  # may be given more than once on the command line
    # The default as documented, where the value alone does not say it (a None default).
    default_doc: str | None = None
    default_note: str | None = None  # said after the value, e.g. "20 MiB"
    # Reads the flag's text (command line and environment); default: from the field type.
    parse: Callable[[str], object] | None = None


def parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off"}:
        return False
    raise argparse.ArgumentTypeError(f"expected a boolean, got {text!r}")


def parse_auto_bool(text: str) -> str:
    """`auto`, or a boolean as `parse_bool` reads it, said `true` or `false`."""
    if text.strip().lower() == "auto":
        return "auto"
    try:
        return "true" if parse_bool(text) else "false"
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"expected `auto` or a boolean, got {text!r}") from None


# What a flag given alone on the command line means, by its reader: a boolean's true.
ALONE: dict[Callable[[str], object], object] = {parse_bool: True, parse_auto_bool: "true"}


def one_name(text: str) -> tuple[str, ...]:
    return (text.strip(),) if text.strip() else ()


def comma_names(text: str) -> tuple[str, ...]:
    return tuple(name.strip() for name in text.split(",") if name.strip())
