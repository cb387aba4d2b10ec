"""Bounding JSON schemas so that constrained output always finishes within its budget.

A grammar alone does not make a small model's output valid: an unbounded
integer, string or array lets it run on until `max_tokens` cuts the JSON off
(measured on SmolLM2). So every schema is tightened before it is compiled:
strings, arrays and numbers get bounds and objects lose undeclared properties.
A document valid for the tightened schema is valid for the original one.

When the token budget is known, the added bounds shrink until the longest
document the schema admits fits in it (counting a token per character, the
worst case: SmolLM2 writes digits one token each). Bounds the client declared
are never changed.

`check_schema` is the one validity check of a client's schema (response_format and
tool parameters), for the HTTP side's early 400 and the backend alike. It bounds the
schema's size and nesting first (`check_schema_size`): validating, tightening and
compiling a schema take time in proportion to its size and recurse per level, so an
unbounded one could hold a worker for seconds or exhaust the recursion limit.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from engine.errors import EngineRequestError

INTEGER_BOUND = 10**9
NUMBER_BOUND = 1e9
MAX_PROPERTIES_FREE = 8  # objects that declare no properties
NUMBER_TOKENS = 24  # a bounded number may still have a long fraction: assumed
UNKNOWN_TOKENS = 64  # $ref and other shapes not measured here

_SUBSCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_SUBSCHEMA_MAPS = ("properties", "$defs", "definitions", "patternProperties")
_SUBSCHEMA_SINGLE = ("items", "not", "if", "then", "else", "contains")


@dataclass(frozen=True, slots=True)
class Caps:
    """The bounds added where a schema declares none."""

    string: int = 200
    items: int = 16

    def halved(self) -> Caps:
        return Caps(string=max(8, self.string // 2), items=max(1, self.items // 2))


DEFAULT_CAPS = Caps()


def tighten(schema: Any, caps: Caps = DEFAULT_CAPS) -> Any:
    """A copy of `schema` whose every unbounded string, array, number and object is bounded."""
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    for key in _SUBSCHEMA_LISTS:
        if isinstance(out.get(key), list):
            out[key] = [tighten(s, caps) for s in out[key]]
    for key in _SUBSCHEMA_MAPS:
        if isinstance(out.get(key), dict):
            out[key] = {name: tighten(s, caps) for name, s in out[key].items()}
    for key in _SUBSCHEMA_SINGLE:
        if isinstance(out.get(key), dict):
            out[key] = tighten(out[key], caps)
    if isinstance(out.get("additionalProperties"), dict):
        out["additionalProperties"] = tighten(out["additionalProperties"], caps)
    if "enum" in out or "const" in out:
        return out
    types = out.get("type")
    kinds = set(types) if isinstance(types, list) else {types}
    if "string" in kinds and "maxLength" not in out and "format" not in out:
        out["maxLength"] = max(caps.string, out.get("minLength", 0))
    if "array" in kinds and "maxItems" not in out:
        out["maxItems"] = max(caps.items, out.get("minItems", 0))
    if "integer" in kinds:
        out.setdefault("minimum", -INTEGER_BOUND)
        out.setdefault("maximum", INTEGER_BOUND)
    elif "number" in kinds:
        out.setdefault("minimum", -NUMBER_BOUND)
        out.setdefault("maximum", NUMBER_BOUND)
    if "object" in kinds and "additionalProperties" not in out:
        out["additionalProperties"] = False if "properties" in out else any_scalar(caps)
        if "properties" not in out:
            out.setdefault("maxProperties", MAX_PROPERTIES_FREE)
    return out


def any_scalar(caps: Caps) -> dict[str, Any]:
    """What a free-form object (`json_object`) admits as a value: scalars and flat lists."""
    short = min(caps.string, 80)
    return {
        "anyOf": [
            {"type": "string", "maxLength": short},
            {"type": "integer", "minimum": -INTEGER_BOUND, "maximum": INTEGER_BOUND},
            {"type": "number", "minimum": -NUMBER_BOUND, "maximum": NUMBER_BOUND},
            {"type": "boolean"},
            {"type": "null"},
            {
                "type": "array",
                "maxItems": caps.items,
                "items": {"type": "string", "maxLength": min(short, 60)},
            },
        ]
    }


def worst_case_tokens(schema: Any) -> int:
    """An upper estimate of the tokens of the longest compact document `schema` admits."""
    if not isinstance(schema, dict):
        return UNKNOWN_TOKENS if schema is not False else 0
    if "const" in schema:
        return len(json.dumps(schema["const"]))
    if "enum" in schema:
        return max((len(json.dumps(v)) for v in schema["enum"]), default=1)
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list):
            return max((worst_case_tokens(s) for s in schema[key]), default=1)
    if isinstance(schema.get("allOf"), list):
        return min((worst_case_tokens(s) for s in schema["allOf"]), default=UNKNOWN_TOKENS)
    types = schema.get("type")
    kinds = types if isinstance(types, list) else [types]
    return max(_worst_of_kind(kind, schema) for kind in kinds)


def _worst_of_kind(kind: Any, schema: dict[str, Any]) -> int:
    if kind == "string":
        return schema.get("maxLength", 10_000) + 2
    if kind == "integer":
        bound = max(abs(schema.get("minimum", 10**18)), abs(schema.get("maximum", 10**18)))
        return len(str(int(bound))) + 1
    if kind == "number":
        return NUMBER_TOKENS
    if kind in ("boolean", "null"):
        return 5
    if kind == "array":
        return 2 + schema.get("maxItems", 10_000) * (worst_case_tokens(schema.get("items")) + 1)
    if kind == "object":
        return _worst_object(schema)
    return UNKNOWN_TOKENS


def _worst_object(schema: dict[str, Any]) -> int:
    total = 2
    for name, value in (schema.get("properties") or {}).items():
        total += len(name) + 4 + worst_case_tokens(value)
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict):
        total += schema.get("maxProperties", 10_000) * (40 + worst_case_tokens(extra))
    return total


def fit_to_budget(schema: Any, budget_tokens: int | None) -> Any:
    """`schema` tightened, with its added bounds shrunk until it fits `budget_tokens`.

    Returns the smallest caps' version when even that does not fit: the client's own
    bounds then decide, and `max_tokens` may still cut the document."""
    caps = DEFAULT_CAPS
    tight = tighten(schema, caps)
    while budget_tokens is not None and worst_case_tokens(tight) > budget_tokens:
        smaller = caps.halved()
        if smaller == caps:
            break
        caps = smaller
        tight = tighten(schema, caps)
    return tight


# A schema's bounds, far above what tools and response formats use in practice (OpenAI
# allows 5 levels of object nesting and 5,000 properties in structured outputs).
MAX_SCHEMA_DEPTH = 32  # JSON levels (objects and arrays) inside the schema
MAX_SCHEMA_NODES = 5_000  # values of every kind, keys not counted
MAX_SCHEMA_CHARS = 100_000  # characters of every key and string


def check_schema_size(schema: Any, param: str) -> int:
    """Reject a schema nested deeper, or larger, than the bounds above; return its number
    of values. Walks without recursion, and stops as soon as a bound is sure to be passed."""
    nodes = chars = 0
    stack: list[tuple[Any, int]] = [(schema, 1)]
    while stack:
        value, depth = stack.pop()
        nodes += 1
        if isinstance(value, dict | list):
            if depth > MAX_SCHEMA_DEPTH:
                raise EngineRequestError(
                    f"The JSON schema nests deeper than {MAX_SCHEMA_DEPTH} levels.",
                    param=param,
                    code="schema_too_deep",
                )
            # Every value stacked is counted when popped: a container whose values
            # would pass the bound is refused before any of them is stacked, so the
            # walk's work stays bounded however wide the schema.
            if nodes + len(stack) + len(value) > MAX_SCHEMA_NODES:
                raise _too_large(param)
            if isinstance(value, dict):
                chars += sum(len(key) for key in value)
                stack.extend((item, depth + 1) for item in value.values())
            else:
                stack.extend((item, depth + 1) for item in value)
        elif isinstance(value, str):
            chars += len(value)
        if nodes > MAX_SCHEMA_NODES or chars > MAX_SCHEMA_CHARS:
            raise _too_large(param)
    return nodes


def _too_large(param: str) -> EngineRequestError:
    return EngineRequestError(
        f"The JSON schema is too large: at most {MAX_SCHEMA_NODES} values and "
        f"{MAX_SCHEMA_CHARS} characters of keys and strings.",
        param=param,
        code="schema_too_large",
    )


# Schemas found valid, by digest: jsonschema's check takes 2-5 ms for a small tool's
# parameters (1.4 s at the node bound), and the same tools come with every request of a
# client, checked on the HTTP side and again in the backend.
VALID_SCHEMAS = 4096
_valid: OrderedDict[bytes, None] = OrderedDict()
_valid_lock = threading.Lock()


def forget_valid_schemas() -> None:
    """Drop every remembered verdict (measurements of a first check)."""
    with _valid_lock:
        _valid.clear()


def check_schema(schema: dict[str, Any], param: str) -> None:
    """Reject a schema that is too large or nested too deep, or that is not a valid JSON
    Schema, naming where it is wrong."""
    from jsonschema import exceptions, validators

    check_schema_size(schema, param)
    text = json.dumps(schema, separators=(",", ":"), ensure_ascii=False)
    digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()
    with _valid_lock:
        if digest in _valid:
            _valid.move_to_end(digest)
            return
    try:
        validators.validator_for(schema).check_schema(schema)
    except exceptions.SchemaError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "(root)"
        raise EngineRequestError(
            f"Invalid JSON schema at {where}: {exc.message}", param=param
        ) from None
    with _valid_lock:
        _valid[digest] = None
        while len(_valid) > VALID_SCHEMAS:
            _valid.popitem(last=False)
