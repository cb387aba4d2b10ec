"""The record and the comparison of `python -m perf agent-apis-vs-vllm`: shapes, values,
SSE parsing, event runs and the differences between two servers' records."""

from __future__ import annotations

from perf.scenarios.agent_apis_diff import differences, summary_markdown
from perf.scenarios.agent_apis_record import collapse, shape, sse_events, values


def test_shape_merges_list_elements_and_joins_types() -> None:
    body = {"output": [{"type": "message", "n": 1}, {"type": "function_call", "n": None}]}
    assert shape(body) == {
        "$": "object",
        "$.output": "list",
        "$.output[]": "object",
        "$.output[].n": "int|null",
        "$.output[].type": "str",
    }
    assert values(body) == {"$.output[].type": '"function_call"|"message"'}


def test_sse_events_and_runs_of_one_type() -> None:
    lines = ["event: a", 'data: {"type": "a"}', "", 'data: {"type": "b"}', "", "data: [DONE]", ""]
    assert list(sse_events(iter(lines))) == [
        ("a", '{"type": "a"}'),
        (None, '{"type": "b"}'),
        (None, "[DONE]"),
    ]
    assert collapse(["start", "delta", "delta", "delta", "stop"]) == ["start", "delta xN", "stop"]


def test_differences_name_each_aspect() -> None:
    ours = [{"id": "x", "what": "w", "status": 200, "shape": {"$.a": "int", "$.b": "str"}}]
    theirs = [{"id": "x", "what": "w", "status": 200, "shape": {"$.a": "str", "$.c": "str"}}]
    found = differences(ours, theirs)
    assert [d["aspect"] for d in found] == ["shape: paths", "shape: types"]
    assert found[0]["lilac"] == ["$.b"] and found[0]["vllm"] == ["$.c"]
    assert differences(ours, ours) == []
    run = {"requests": 1, "seconds": 1.0, "load_average": [1.0]}
    text = summary_markdown(
        {"lilac": run | {"records": ours}, "vllm": run | {"records": theirs}}, found
    )
    assert "1 of them answered differently, 2 differences" in text
    assert "| `x` | shape: paths |" in text


def test_a_status_difference_skips_the_shape() -> None:
    ours = [{"id": "x", "status": 200, "shape": {"$.a": "int"}}]
    theirs = [{"id": "x", "status": 400, "shape": {"$.error": "object"}}]
    assert [d["aspect"] for d in differences(ours, theirs)] == ["status"]
