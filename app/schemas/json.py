"""JSON values as Python holds them once decoded: what chat templates, stored rows and
reports pass around as plain dicts and lists."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypeAlias

# Nested values are read-only views, which are covariant: a `list[JsonObject]` is then a
# JsonValue as it is, where `list[JsonValue]` would need a copy.
JsonValue: TypeAlias = (
    "str | int | float | bool | Sequence[JsonValue] | Mapping[str, JsonValue] | None"
)
JsonObject: TypeAlias = "dict[str, JsonValue]"
