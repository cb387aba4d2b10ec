"""Everything generated from the flag table (`app.config.settings.Settings`): the command-line
parser, reading the environment and the TOML file, and the documentation's flag tables.

A flag given on the command line wins over the environment, which wins over the TOML
file, which wins over the defaults.
"""

from __future__ import annotations

import argparse
import os
import tomllib
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from app.config.flag import ALONE, Flag, parse_bool
from app.config.settings import ENV_PREFIX, SECTIONS, Settings


@dataclass(frozen=True, slots=True)
class Option:
    """One setting with everything generated from its field: flag, variable, TOML key."""

    field: str  # Settings field: `some_flag`
    flag: str  # `--some-flag`
    env: str  # `LILAC_SOME_FLAG`
    toml_key: str | None  # `some_flag` in the [admission] table, or None
    parse: Callable[[str], object]
    alone: object  # what the flag given alone means (a boolean's true), or None: a value is due
    repeatable: bool
    default: object
    default_doc: str  # the default as the documentation and --help say it
    help: str
    section: str


def _show(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _parser_for(hint: object) -> Callable[[str], object]:
    kinds = [arg for arg in typing.get_args(hint) if arg is not type(None)] or [hint]
    if len(kinds) != 1 or kinds[0] not in (str, int, float, bool):
        raise TypeError(f"no parser for {hint!r}: give the Flag a `parse`")
    parse: Callable[[str], object] = parse_bool if kinds[0] is bool else kinds[0]
    return parse


def _options() -> tuple[Option, ...]:
    hints = typing.get_type_hints(Settings, include_extras=True)
    defaults = Settings()
    options = []
    for field in Settings.__struct_fields__:
        hint = hints[field]
        flag = next(m for m in getattr(hint, "__metadata__", ()) if isinstance(m, Flag))
        if flag.section not in SECTIONS:
            raise ValueError(f"{field}: unknown section {flag.section!r}")
        default = getattr(defaults, field)
        if flag.default_doc is not None:
            default_doc = flag.default_doc
        elif default is None:
            raise ValueError(f"{field}: a None default needs a default_doc")
        else:
            default_doc = f"`{_show(default)}`"
            if flag.default_note:
                default_doc += f" ({flag.default_note})"
        parse = flag.parse or _parser_for(hint.__origin__)
        options.append(
            Option(
                field=field,
                flag="--" + field.replace("_", "-"),
                env=ENV_PREFIX + field.upper(),
                toml_key=field if flag.toml else None,
                parse=parse,
                alone=ALONE.get(parse),
                repeatable=flag.repeatable,
                default=default,
                default_doc=default_doc,
                help=flag.help,
                section=flag.section,
            )
        )
    return tuple(options)


OPTIONS: tuple[Option, ...] = _options()


def markdown_table(section: str) -> list[str]:
    """The documentation's table of one section's flags, line by line: docs/hooks/
    generated.py renders it into docs/configuration.md when the site is built."""
    lines = ["| flag | environment | default | meaning |", "| --- | --- | --- | --- |"]
    lines += [
        f"| `{o.flag}` | `{o.env}` | {o.default_doc} | {o.help} |"
        for o in OPTIONS
        if o.section == section
    ]
    return lines


def build_parser(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    groups = {key: parser.add_argument_group(f"{title} flags") for key, title in SECTIONS.items()}
    for option in OPTIONS:
        default = option.default_doc.replace("`", "")
        help_text = f"{option.help} (default: {default}) [{option.env}]".replace("`", "")
        # A boolean flag alone means true: `--allow-private-image-urls`.
        extra: dict[str, Any] = {}
        if option.alone is not None:
            extra = {"nargs": "?", "const": option.alone}
        if option.repeatable:  # each value (a tuple) extends the list
            extra = {"action": "extend"}
        groups[option.section].add_argument(
            option.flag,
            type=option.parse,
            default=None,
            help=help_text.replace("%", "%%"),
            **extra,
        )
    return parser


def settings_from(
    args: argparse.Namespace | None = None, environ: Mapping[str, str] | None = None
) -> Settings:
    """Merge flags over environment over the TOML file over defaults; validate types once."""
    environ = os.environ if environ is None else environ
    values: dict[str, object] = {}
    for option in OPTIONS:
        value = getattr(args, option.field, None) if args is not None else None
        if value is None:
            raw = environ.get(option.env)
            if raw is None or raw == "":
                continue
            try:
                value = option.parse(raw)
            except (ValueError, argparse.ArgumentTypeError) as exc:
                raise SystemExit(f"{option.env}: {exc}") from exc
        values[option.field] = value
    config = values.get("config")
    if config:
        for field, value in _admission_table(str(config)).items():
            values.setdefault(field, value)
    return msgspec.convert(values, Settings)


def _admission_table(path: str) -> dict[str, object]:
    """The [admission] table of a TOML file, keys checked against the TOML keys."""
    try:
        with open(path, "rb") as file:
            table = tomllib.load(file).get("admission", {})
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise SystemExit(f"--config {path}: {exc}") from exc
    known = {option.toml_key: option.field for option in OPTIONS if option.toml_key}
    keys = {key.replace("-", "_"): value for key, value in table.items()}
    unknown = sorted(set(keys) - set(known))
    if unknown:
        raise SystemExit(f"--config {path}: unknown [admission] keys: {', '.join(unknown)}")
    return {known[key]: value for key, value in keys.items()}


def parse_args(argv: Sequence[str] | None = None) -> Settings:
    parser = build_parser(argparse.ArgumentParser(prog="lilac-serve serve"))
    return settings_from(parser.parse_args(argv))
