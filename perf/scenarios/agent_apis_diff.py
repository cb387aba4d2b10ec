"""The differences between two servers' records of the same requests
(perf/scenarios/agent_apis_record.py), and the Markdown summary of them."""

from __future__ import annotations

from typing import Any

from perf.scenarios.agent_apis_record import collapse

# Record fields compared as they are (besides shapes, values, events and usage).
PLAIN = (
    "status",
    "sdk",
    "skipped",
    "exception",
    "headers",
    "done_line",
    "function_calls",
    "tool_uses",
    "delete_sdk",
    "status_after",
)
SHOWN = 10  # paths listed per difference in the table; the JSON file has them all


def differences(ours: list[dict[str, Any]], theirs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per (case, aspect) where the two records differ."""
    by_id = {record["id"]: record for record in theirs}
    out: list[dict[str, Any]] = []
    for mine in ours:
        other = by_id.get(mine["id"])
        if other is None:
            continue
        for aspect, lilac, vllm in _aspects(mine, other):
            out.append({"id": mine["id"], "aspect": aspect, "lilac": lilac, "vllm": vllm})
    return out


def _aspects(a: dict[str, Any], b: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    found: list[tuple[str, Any, Any]] = []
    for key in PLAIN:
        if a.get(key) != b.get(key):
            found.append((key, a.get(key), b.get(key)))
    if a.get("status") == b.get("status"):
        found += _shape_diff("shape", a.get("shape") or {}, b.get("shape") or {})
        found += _value_diff("values", a.get("values") or {}, b.get("values") or {})
    if _sequence(a.get("events")) != _sequence(b.get("events")):
        found.append(("events", _sequence(a.get("events")), _sequence(b.get("events"))))
    shapes_a, shapes_b = a.get("event_shapes") or {}, b.get("event_shapes") or {}
    for kind in sorted(set(shapes_a) & set(shapes_b)):
        found += _shape_diff(f"event {kind}", shapes_a[kind], shapes_b[kind])
    values_a, values_b = a.get("event_values") or {}, b.get("event_values") or {}
    for kind in sorted(set(values_a) & set(values_b)):
        found += _value_diff(f"event {kind} values", values_a[kind], values_b[kind])
    usage_a, usage_b = _usage_shape(a.get("usage")), _usage_shape(b.get("usage"))
    if usage_a != usage_b:
        found.append(("usage fields", usage_a, usage_b))
    for key in ("chain_input_tokens", "alone_input_tokens"):
        if key in a or key in b:
            found.append((key, a.get(key), b.get(key)))
    return found


# Events the `anthropic` package's stream helper derives from each delta (one per
# delta, so their runs interleave with the deltas' and count tokens).
DERIVED = frozenset({"text", "input_json", "thinking", "signature", "citation"})


def _sequence(events: list[str] | None) -> list[str] | None:
    """The event types in order, each run of one type once (`xN`: more than one)."""
    if events is None:
        return None
    kinds = [e.removesuffix(" xN") for e in events if e.removesuffix(" xN") not in DERIVED]
    return collapse(kinds)


def _usage_shape(usage: Any) -> Any:
    if not isinstance(usage, dict):
        return usage if usage is None else type(usage).__name__
    return sorted(
        f"{k}{'.' + ','.join(sorted(v)) if isinstance(v, dict) else ''}" for k, v in usage.items()
    )


def _shape_diff(aspect: str, a: dict[str, str], b: dict[str, str]) -> list[tuple[str, Any, Any]]:
    only_a = sorted(set(a) - set(b))
    only_b = sorted(set(b) - set(a))
    typed = sorted(p for p in set(a) & set(b) if a[p] != b[p])
    found: list[tuple[str, Any, Any]] = []
    if only_a or only_b:
        found.append((f"{aspect}: paths", only_a, only_b))
    if typed:
        found.append((f"{aspect}: types", {p: a[p] for p in typed}, {p: b[p] for p in typed}))
    return found


def _value_diff(aspect: str, a: dict[str, str], b: dict[str, str]) -> list[tuple[str, Any, Any]]:
    keys = sorted(p for p in set(a) | set(b) if a.get(p) != b.get(p))
    if not keys:
        return []
    return [(aspect, {p: a.get(p) for p in keys}, {p: b.get(p) for p in keys})]


def summary_markdown(runs: dict[str, dict[str, Any]], diffs: list[dict[str, Any]]) -> str:
    lilac, vllm = runs["lilac"], runs["vllm"]
    other = {record["id"]: record for record in vllm["records"]}
    lines = [
        "| request | what | lilac-serve | `vllm serve` |",
        "| --- | --- | --- | --- |",
    ]
    for record in lilac["records"]:
        theirs = other.get(record["id"], {})
        lines.append(f"| `{record['id']}` | {record['what']} | {_cell(record)} | {_cell(theirs)} |")
    differing = sorted({d["id"] for d in diffs})
    head = [
        f"{lilac['requests']} requests to each server "
        f"(lilac-serve {lilac['seconds']} s, load {lilac['load_average']}; "
        f"`vllm serve` {vllm['seconds']} s, load {vllm['load_average']}); "
        f"{len(differing)} of them answered differently, {len(diffs)} differences.",
        "",
    ]
    detail = ["", "| request | aspect | lilac-serve | `vllm serve` |", "| --- | --- | --- | --- |"]
    for d in diffs:
        detail.append(
            f"| `{d['id']}` | {d['aspect']} | {_short(d['lilac'])} | {_short(d['vllm'])} |"
        )
    return "\n".join(head + lines + detail) + "\n"


def _cell(record: dict[str, Any]) -> str:
    if not record:
        return "(not run)"
    if "skipped" in record:
        return f"skipped ({record['skipped']})"
    if "exception" in record:
        return f"failed: {_escape(record['exception'][:80])}"
    status = str(record.get("status"))
    error = _error_type(record)
    return f"{status} {error}".strip()


def _error_type(record: dict[str, Any]) -> str:
    values = record.get("values") or {}
    if (record.get("status") or 0) < 400:
        return ""
    kinds = [v for p, v in values.items() if p in ("$.error.type", "$.error.code", "$.type")]
    return _escape(" ".join(kind.strip('"') for kind in kinds))


def _short(value: Any) -> str:
    if isinstance(value, list) and len(value) > SHOWN:
        value = [*value[:SHOWN], f"+{len(value) - SHOWN} more"]
    if isinstance(value, dict) and len(value) > SHOWN:
        items = list(value.items())[:SHOWN]
        value = {**dict(items), "...": f"+{len(value) - SHOWN} more"}
    text = value if isinstance(value, str) else _json(value)
    return _escape(text[:400])


def _json(value: Any) -> str:
    import json

    return json.dumps(value)


def _escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")
