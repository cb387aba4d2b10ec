"""What one request's answer looks like, written down so two servers' answers compare:
the status, the body's shape (every path with its JSON types), the values of the fields
that name kinds (`type`, `status`, `stop_reason`, ...), the usage object, and for a
stream the sequence of event types and each event type's shape."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx

# Fields whose values are part of the shape: they name a kind, not content.
VALUE_KEYS = frozenset(
    {"type", "object", "status", "stop_reason", "role", "code", "finish_reason", "reason"}
)
HEADERS = ("content-type", "x-tools-not-served", "x-max-tokens-clamped")
EXCERPT = 300


def json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "str"
    if isinstance(value, list):
        return "list"
    return "object"


def shape(value: Any, path: str = "$") -> dict[str, str]:
    """Every path of `value` with its type; a list's elements merge under `path[]`
    (types of different elements joined by `|`)."""
    out: dict[str, set[str]] = {}
    _walk(value, path, out)
    return {key: "|".join(sorted(types)) for key, types in sorted(out.items())}


def _walk(value: Any, path: str, out: dict[str, set[str]]) -> None:
    out.setdefault(path, set()).add(json_type(value))
    if isinstance(value, dict):
        for key, item in value.items():
            _walk(item, f"{path}.{key}", out)
    elif isinstance(value, list):
        for item in value:
            _walk(item, f"{path}[]", out)


def values(value: Any, path: str = "$") -> dict[str, str]:
    """The values of VALUE_KEYS fields, by path (several values joined by `|`)."""
    out: dict[str, set[str]] = {}
    _values(value, path, out)
    return {key: "|".join(sorted(found)) for key, found in sorted(out.items())}


def _values(value: Any, path: str, out: dict[str, set[str]]) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            here = f"{path}.{key}"
            if key in VALUE_KEYS and not isinstance(item, dict | list):
                out.setdefault(here, set()).add(json.dumps(item))
            _values(item, here, out)
    elif isinstance(value, list):
        for item in value:
            _values(item, f"{path}[]", out)


def usage_of(body: Any) -> Any:
    """The usage object wherever the API puts it (top level, or in a Response)."""
    if not isinstance(body, dict):
        return None
    if "usage" in body:
        return body["usage"]
    inner = body.get("response") or body.get("message")
    return usage_of(inner) if isinstance(inner, dict) else None


def of_response(response: httpx.Response) -> dict[str, Any]:
    """The record of a non-streamed answer."""
    record: dict[str, Any] = {"status": response.status_code, "headers": _headers(response)}
    try:
        body = response.json()
    except ValueError:
        record["body_excerpt"] = response.text[:EXCERPT]
        return record
    record |= {"shape": shape(body), "values": values(body), "usage": usage_of(body)}
    if response.status_code >= 400:
        record["body_excerpt"] = json.dumps(body)[:EXCERPT]
    return record


def of_stream(response: httpx.Response) -> dict[str, Any]:
    """The record of an SSE answer, read to its end."""
    record: dict[str, Any] = {"status": response.status_code, "headers": _headers(response)}
    if response.status_code >= 400 or "text/event-stream" not in record["headers"].get(
        "content-type", ""
    ):
        response.read()
        return record | of_response(response)
    kinds: list[str] = []
    shapes: dict[str, dict[str, str]] = {}
    vals: dict[str, dict[str, str]] = {}
    last: Any = None
    done = False
    for event, data in sse_events(response.iter_lines()):
        if data == "[DONE]":
            done = True
            continue
        try:
            body = json.loads(data)
        except ValueError:
            kinds.append(f"(not JSON: {data[:40]})")
            continue
        kind = str(body.get("type") or event or "(untyped)")
        if event and event != kind:
            kind = f"{event}/{kind}"
        kinds.append(kind)
        shapes.setdefault(kind, {}).update(shape(body))
        vals.setdefault(kind, {}).update(values(body))
        if usage_of(body) is not None:
            last = usage_of(body)
    return record | {
        "events": collapse(kinds),
        "event_shapes": shapes,
        "event_values": vals,
        "done_line": done,
        "usage": last,
    }


def sse_events(lines: Iterator[str]) -> Iterator[tuple[str | None, str]]:
    """(event name or None, data) of each SSE event."""
    event: str | None = None
    data: list[str] = []
    for line in lines:
        if not line:
            if data:
                yield event, "\n".join(data)
            event, data = None, []
        elif line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].strip())
    if data:
        yield event, "\n".join(data)


def collapse(kinds: list[str]) -> list[str]:
    """Runs of one event type as `type x N`: the sequence without the token count."""
    out: list[str] = []
    run = 0
    for index, kind in enumerate(kinds):
        run += 1
        if index + 1 == len(kinds) or kinds[index + 1] != kind:
            out.append(kind if run == 1 else f"{kind} xN")
            run = 0
    return out


def _headers(response: httpx.Response) -> dict[str, str]:
    return {name: response.headers[name] for name in HEADERS if name in response.headers}
