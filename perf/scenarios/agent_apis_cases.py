"""The requests of `python -m perf agent-apis-vs-vllm`, the same for each server: the
Responses API, the Messages API and model retrieval, through the `openai` and
`anthropic` packages (their parsing is part of the answer: `sdk` says whether the
package took it) and raw HTTP (for the bytes the packages hide and the bodies they would
refuse to send). Temperature 0, a few tokens each."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anthropic
import httpx
import openai

from perf.scenarios.agent_apis_record import collapse, of_response, of_stream

# Another served name for a dry run against any server (the scripted app serves `scripted`).
MODEL = os.environ.get("AGENT_APIS_MODEL", "HuggingFaceTB/SmolLM2-135M-Instruct")
FRANCE = "What is the capital of France? Answer in one word."
LOOKUP = {
    "type": "function",
    "name": "lookup",
    "description": "Look up a city's population.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 12}},
        "required": ["city"],
        "additionalProperties": False,
    },
    "strict": True,
}
LOOKUP_ANTHROPIC = {
    "name": "lookup",
    "description": "Look up a city's population.",
    "input_schema": LOOKUP["parameters"],
}
R = {"model": MODEL, "temperature": 0, "max_output_tokens": 8}
M = {"model": MODEL, "temperature": 0, "max_tokens": 8}


def for_sdk(body: dict[str, Any]) -> dict[str, Any]:
    """A Messages body as keyword arguments of the `anthropic` package, whose `create`
    no longer takes `temperature` (the newest models fix it): sent as an extra field."""
    rest = dict(body)
    return rest | {"extra_body": {"temperature": rest.pop("temperature")}}


@dataclass
class Context:
    http: httpx.Client
    oa: openai.OpenAI
    an: anthropic.Anthropic
    state: dict[str, Any] = field(default_factory=dict)


class Skip(Exception):
    """A case whose earlier step did not give what it needs."""


Case = tuple[str, str, str, Callable[[Context], dict[str, Any]]]
CASES: list[Case] = []


def case(case_id: str, api: str, what: str) -> Callable[[Callable[[Context], Any]], Any]:
    def register(fn: Callable[[Context], dict[str, Any]]) -> Callable[[Context], Any]:
        CASES.append((case_id, api, what, fn))
        return fn

    return register


def sdk_call(call: Callable[[], Any]) -> dict[str, Any]:
    """A `with_raw_response` call: the raw record, and whether the package parsed it."""
    try:
        raw = call()
    except (openai.APIStatusError, anthropic.APIStatusError) as exc:
        return of_response(exc.response) | {"sdk": f"raises {type(exc).__name__}"}
    record = of_response(raw.http_response)
    try:
        parsed = raw.parse()
        record["sdk"] = f"parsed {type(parsed).__name__.split('[')[0]}"
        record["parsed"] = parsed
    except Exception as exc:  # the package's own parsing failed: that is the finding
        record["sdk"] = f"parse failed: {type(exc).__name__}: {str(exc)[:120]}"
    return record


def post(ctx: Context, path: str, body: Any, **kw: Any) -> dict[str, Any]:
    return of_response(ctx.http.post(path, json=body, **kw))


def post_stream(ctx: Context, path: str, body: Any) -> dict[str, Any]:
    with ctx.http.stream("POST", path, json=body) as response:
        return of_stream(response)


def _id(record: dict[str, Any]) -> str:
    parsed = record.pop("parsed", None)
    if parsed is None or not getattr(parsed, "id", None):
        raise Skip("no response id")
    return str(parsed.id)


def _need(ctx: Context, key: str) -> Any:
    if key not in ctx.state:
        raise Skip(f"needs {key}")
    return ctx.state[key]


# ---------------------------------------------------------------- Responses API


@case("r.create", "responses", "string input, instructions, store true (SDK)")
def r_create(ctx: Context) -> dict[str, Any]:
    record = sdk_call(
        lambda: ctx.oa.responses.with_raw_response.create(
            input=FRANCE, instructions="Be brief.", store=True, **R
        )
    )
    ctx.state["first"] = _id(record)
    return record


@case("r.items", "responses", "developer + user message items, input_text parts (SDK)")
def r_items(ctx: Context) -> dict[str, Any]:
    items = [
        {"role": "developer", "content": "Answer in one word."},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": FRANCE}]},
    ]
    record = sdk_call(
        lambda: ctx.oa.responses.with_raw_response.create(input=items, store=False, **R)
    )
    record.pop("parsed", None)
    return record


@case("r.json_schema", "responses", "text.format json_schema strict (SDK)")
def r_json_schema(ctx: Context) -> dict[str, Any]:
    fmt = {
        "type": "json_schema",
        "name": "city",
        "strict": True,
        "schema": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 12}},
            "required": ["city"],
            "additionalProperties": False,
        },
    }
    record = sdk_call(
        lambda: ctx.oa.responses.with_raw_response.create(
            input=FRANCE, text={"format": fmt}, store=False, **{**R, "max_output_tokens": 16}
        )
    )
    record.pop("parsed", None)
    return record


@case("r.stream.raw", "responses", "stream: true, raw SSE")
def r_stream_raw(ctx: Context) -> dict[str, Any]:
    return post_stream(ctx, "/v1/responses", {"input": FRANCE, "stream": True, "store": False, **R})


@case("r.stream.sdk", "responses", "the SDK's responses.stream() helper")
def r_stream_sdk(ctx: Context) -> dict[str, Any]:
    kinds: list[str] = []
    try:
        with ctx.oa.responses.stream(input=FRANCE, store=False, **R) as stream:
            kinds = [event.type for event in stream]
            final = stream.get_final_response()
        verdict = f"final {final.status}, output_text {final.output_text!r}"
    except Exception as exc:  # the helper refusing the sequence is the finding
        verdict = f"raises {type(exc).__name__}: {str(exc)[:160]}"
    return {"status": 200, "events": collapse(kinds), "sdk": verdict}


@case("r.retrieve", "responses", "GET /v1/responses/{id} (SDK)")
def r_retrieve(ctx: Context) -> dict[str, Any]:
    first = _need(ctx, "first")
    record = sdk_call(lambda: ctx.oa.responses.with_raw_response.retrieve(first))
    record.pop("parsed", None)
    return record


@case("r.input_items", "responses", "GET /v1/responses/{id}/input_items (SDK)")
def r_input_items(ctx: Context) -> dict[str, Any]:
    first = _need(ctx, "first")
    record = sdk_call(lambda: ctx.oa.responses.input_items.with_raw_response.list(first))
    record.pop("parsed", None)
    return record


@case("r.chain.call", "responses", "previous_response_id + forced function tool (SDK)")
def r_chain_call(ctx: Context) -> dict[str, Any]:
    first = _need(ctx, "first")
    record = sdk_call(
        lambda: ctx.oa.responses.with_raw_response.create(
            input="How many people live in Paris?",
            previous_response_id=first,
            tools=[LOOKUP],  # type: ignore[list-item]  # a plain dict, as clients send it
            tool_choice={"type": "function", "name": "lookup"},
            **{**R, "max_output_tokens": 40},
        )
    )
    parsed = record.get("parsed")
    calls = [item for item in getattr(parsed, "output", []) if item.type == "function_call"]
    record["function_calls"] = len(calls)
    if calls:
        ctx.state["call_id"] = calls[0].call_id
    ctx.state["second"] = _id(record)
    return record


@case("r.chain.output", "responses", "function_call_output on the chain (SDK)")
def r_chain_output(ctx: Context) -> dict[str, Any]:
    second, call_id = _need(ctx, "second"), _need(ctx, "call_id")
    output = [{"type": "function_call_output", "call_id": call_id, "output": "2.1 million"}]
    record = sdk_call(
        lambda: ctx.oa.responses.with_raw_response.create(
            input=output,  # type: ignore[arg-type]  # a plain dict, as clients send it
            previous_response_id=second,
            tools=[LOOKUP],  # type: ignore[list-item]
            **R,
        )
    )
    ctx.state["third"] = _id(record)
    return record


@case("r.chain.prompt", "responses", "the third turn's prompt holds the call (input_tokens)")
def r_chain_prompt(ctx: Context) -> dict[str, Any]:
    """The chain's prompt, measured: the third turn again without the chain is shorter
    by what the chain carried (a server that drops the function call carries less)."""
    call_id = _need(ctx, "call_id")
    third = ctx.http.get(f"/v1/responses/{_need(ctx, 'third')}").json()
    alone = ctx.http.post(
        "/v1/responses",
        json={
            "input": [
                {"type": "function_call", "call_id": call_id, "name": "lookup", "arguments": "{}"},
                {"type": "function_call_output", "call_id": call_id, "output": "2.1 million"},
            ],
            "tools": [LOOKUP],
            "store": False,
            **R,
        },
    ).json()
    return {
        "status": 200,
        "chain_input_tokens": (third.get("usage") or {}).get("input_tokens"),
        "alone_input_tokens": (alone.get("usage") or {}).get("input_tokens"),
    }


@case("r.delete", "responses", "DELETE /v1/responses/{id} (raw; the SDK's delete on another)")
def r_delete(ctx: Context) -> dict[str, Any]:
    first = _need(ctx, "first")
    record = of_response(ctx.http.delete(f"/v1/responses/{first}"))
    record["status_after"] = ctx.http.get(f"/v1/responses/{first}").status_code
    if "second" in ctx.state:
        try:
            ctx.oa.responses.delete(ctx.state["second"])
            record["delete_sdk"] = "returns"
        except openai.APIStatusError as exc:
            record["delete_sdk"] = f"raises {type(exc).__name__}"
    return record


@case("r.err.unknown_item", "responses", "an input item of an unknown type")
def r_err_unknown_item(ctx: Context) -> dict[str, Any]:
    return post(ctx, "/v1/responses", {"input": [{"type": "bogus_item", "x": 1}], **R})


@case("r.err.wrong_type", "responses", "max_output_tokens as a string")
def r_err_wrong_type(ctx: Context) -> dict[str, Any]:
    return post(ctx, "/v1/responses", {**R, "input": FRANCE, "max_output_tokens": "eight"})


@case("r.hosted_tool", "responses", "a hosted tool (web_search) beside a function")
def r_hosted_tool(ctx: Context) -> dict[str, Any]:
    body = {"input": FRANCE, "tools": [LOOKUP, {"type": "web_search"}], "store": False, **R}
    return post(ctx, "/v1/responses", body)


@case("r.err.forced_hosted", "responses", "tool_choice forcing the hosted tool")
def r_err_forced_hosted(ctx: Context) -> dict[str, Any]:
    body = {
        "input": FRANCE,
        "tools": [{"type": "web_search"}],
        "tool_choice": {"type": "web_search"},
        "store": False,
        **R,
    }
    return post(ctx, "/v1/responses", body)


@case("r.err.unknown_model", "responses", "an unknown model")
def r_err_unknown_model(ctx: Context) -> dict[str, Any]:
    return post(ctx, "/v1/responses", {**R, "model": "no-such-model", "input": FRANCE})


@case("r.err.unknown_id", "responses", "GET an unknown response id")
def r_err_unknown_id(ctx: Context) -> dict[str, Any]:
    return of_response(ctx.http.get("/v1/responses/resp_doesnotexist0000"))


@case("r.err.unknown_previous", "responses", "previous_response_id unknown")
def r_err_unknown_previous(ctx: Context) -> dict[str, Any]:
    body = {"input": FRANCE, "previous_response_id": "resp_doesnotexist0000", **R}
    return post(ctx, "/v1/responses", body)


# ---------------------------------------------------------------- Messages API


@case("m.create", "messages", "system + user, max_tokens 8 (SDK)")
def m_create(ctx: Context) -> dict[str, Any]:
    record = sdk_call(
        lambda: ctx.an.messages.with_raw_response.create(
            system="Answer in one word.",
            messages=[{"role": "user", "content": FRANCE}],
            **for_sdk(M),
        )
    )
    record.pop("parsed", None)
    return record


@case("m.stream.raw", "messages", "stream: true, raw SSE")
def m_stream_raw(ctx: Context) -> dict[str, Any]:
    body = {"messages": [{"role": "user", "content": FRANCE}], "stream": True, **M}
    return post_stream(ctx, "/v1/messages", body)


@case("m.stream.sdk", "messages", "the SDK's messages.stream() helper")
def m_stream_sdk(ctx: Context) -> dict[str, Any]:
    kinds: list[str] = []
    try:
        with ctx.an.messages.stream(
            messages=[{"role": "user", "content": FRANCE}], **for_sdk(M)
        ) as stream:
            kinds = [event.type for event in stream]
            final = stream.get_final_message()
        verdict = f"final stop_reason {final.stop_reason}, usage {final.usage.to_dict()}"
    except Exception as exc:  # the helper refusing the sequence is the finding
        verdict = f"raises {type(exc).__name__}: {str(exc)[:160]}"
    return {"status": 200, "events": collapse(kinds), "sdk": verdict}


@case("m.count_tokens", "messages", "count_tokens with a system and a tool (SDK)")
def m_count_tokens(ctx: Context) -> dict[str, Any]:
    record = sdk_call(
        lambda: ctx.an.messages.with_raw_response.count_tokens(
            model=MODEL,
            system="Answer in one word.",
            messages=[{"role": "user", "content": FRANCE}],
            tools=[LOOKUP_ANTHROPIC],  # type: ignore[list-item]
        )
    )
    record.pop("parsed", None)
    return record


def _tools_body(choice: dict[str, Any] | None, max_tokens: int = 40) -> dict[str, Any]:
    body: dict[str, Any] = {
        **M,
        "max_tokens": max_tokens,
        "messages": [{"role": "user", "content": "How many people live in Paris?"}],
        "tools": [LOOKUP_ANTHROPIC],
    }
    if choice is not None:
        body["tool_choice"] = choice
    return body


@case("m.tool.auto", "messages", "tools, tool_choice auto")
def m_tool_auto(ctx: Context) -> dict[str, Any]:
    return post(ctx, "/v1/messages", _tools_body({"type": "auto"}))


@case("m.tool.any", "messages", "tool_choice any")
def m_tool_any(ctx: Context) -> dict[str, Any]:
    return post(ctx, "/v1/messages", _tools_body({"type": "any"}))


@case("m.tool.none", "messages", "tool_choice none")
def m_tool_none(ctx: Context) -> dict[str, Any]:
    return post(ctx, "/v1/messages", _tools_body({"type": "none"}, 8))


@case("m.tool.forced", "messages", "tool_choice tool (SDK)")
def m_tool_forced(ctx: Context) -> dict[str, Any]:
    body = _tools_body({"type": "tool", "name": "lookup"})
    record = sdk_call(lambda: ctx.an.messages.with_raw_response.create(**for_sdk(body)))
    parsed = record.pop("parsed", None)
    uses = [block for block in getattr(parsed, "content", []) if block.type == "tool_use"]
    record["tool_uses"] = len(uses)
    if uses:
        ctx.state["tool_use"] = uses[0].model_dump()
    return record


@case("m.tool.result", "messages", "the tool_result round (SDK)")
def m_tool_result(ctx: Context) -> dict[str, Any]:
    use = _need(ctx, "tool_use")
    body = _tools_body(None, 8)
    body["messages"] += [
        {"role": "assistant", "content": [use]},
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": use["id"], "content": "2.1 million"}
            ],
        },
    ]
    record = sdk_call(lambda: ctx.an.messages.with_raw_response.create(**for_sdk(body)))
    record.pop("parsed", None)
    return record


@case("m.tool.stream", "messages", "tool_choice tool, streamed (raw SSE)")
def m_tool_stream(ctx: Context) -> dict[str, Any]:
    body = _tools_body({"type": "tool", "name": "lookup"}) | {"stream": True}
    return post_stream(ctx, "/v1/messages", body)


@case("m.stop_sequences", "messages", "stop_sequences that the answer reaches")
def m_stop_sequences(ctx: Context) -> dict[str, Any]:
    body = {
        **M,
        "max_tokens": 40,
        "messages": [{"role": "user", "content": "Count from 1 to 10, separated by commas."}],
        "stop_sequences": ["4"],
    }
    return post(ctx, "/v1/messages", body)


@case("m.thinking.enabled", "messages", "thinking enabled, budget_tokens 1024")
def m_thinking_enabled(ctx: Context) -> dict[str, Any]:
    body = {
        **M,
        "max_tokens": 1100,
        "messages": [{"role": "user", "content": FRANCE}],
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "stop_sequences": ["."],
    }
    return post(ctx, "/v1/messages", body)


@case("m.thinking.adaptive", "messages", "thinking {type: adaptive}")
def m_thinking_adaptive(ctx: Context) -> dict[str, Any]:
    body = {
        **M,
        "messages": [{"role": "user", "content": FRANCE}],
        "thinking": {"type": "adaptive"},
    }
    return post(ctx, "/v1/messages", body)


@case("m.err.thinking_budget", "messages", "thinking budget_tokens 100 (Anthropic's least is 1024)")
def m_err_thinking_budget(ctx: Context) -> dict[str, Any]:
    body = {
        **M,
        "messages": [{"role": "user", "content": FRANCE}],
        "thinking": {"type": "enabled", "budget_tokens": 100},
    }
    return post(ctx, "/v1/messages", body)


@case("m.err.thinking_over_max", "messages", "thinking budget_tokens 1024 over max_tokens 8")
def m_err_thinking_over_max(ctx: Context) -> dict[str, Any]:
    body = {
        **M,
        "messages": [{"role": "user", "content": FRANCE}],
        "thinking": {"type": "enabled", "budget_tokens": 1024},
    }
    return post(ctx, "/v1/messages", body)


@case("m.effort", "messages", "output_config.effort low")
def m_effort(ctx: Context) -> dict[str, Any]:
    body = {
        **M,
        "messages": [{"role": "user", "content": FRANCE}],
        "output_config": {"effort": "low"},
    }
    return post(ctx, "/v1/messages", body)


@case("m.err.temperature", "messages", "temperature 1.5 (Anthropic's range is 0 to 1)")
def m_err_temperature(ctx: Context) -> dict[str, Any]:
    body = {**M, "temperature": 1.5, "messages": [{"role": "user", "content": FRANCE}]}
    return post(ctx, "/v1/messages", body)


@case("m.max_tokens_32000", "messages", "max_tokens 32000 (over the 2048 context)")
def m_max_tokens_32000(ctx: Context) -> dict[str, Any]:
    body = {
        **M,
        "max_tokens": 32000,
        "messages": [{"role": "user", "content": FRANCE}],
        "stop_sequences": ["."],
    }
    return post(ctx, "/v1/messages", body)


@case("m.beta", "messages", "POST /v1/messages?beta=true, anthropic-beta header")
def m_beta(ctx: Context) -> dict[str, Any]:
    body = {**M, "messages": [{"role": "user", "content": FRANCE}]}
    headers = {"anthropic-beta": "context-management-2025-06-27"}
    return post(ctx, "/v1/messages?beta=true", body, headers=headers)


@case("m.err.missing_max_tokens", "messages", "no max_tokens")
def m_err_missing_max_tokens(ctx: Context) -> dict[str, Any]:
    body = {"model": MODEL, "messages": [{"role": "user", "content": FRANCE}]}
    return post(ctx, "/v1/messages", body)


@case("m.err.wrong_type", "messages", "max_tokens as a string")
def m_err_wrong_type(ctx: Context) -> dict[str, Any]:
    body = {**M, "max_tokens": "eight", "messages": [{"role": "user", "content": FRANCE}]}
    return post(ctx, "/v1/messages", body)


@case("m.err.unknown_block", "messages", "a content block of an unknown type")
def m_err_unknown_block(ctx: Context) -> dict[str, Any]:
    content = [{"type": "bogus_block", "text": "hi"}]
    return post(ctx, "/v1/messages", {**M, "messages": [{"role": "user", "content": content}]})


@case("m.err.server_tool", "messages", "a server tool (web_search_20250305) in tools")
def m_err_server_tool(ctx: Context) -> dict[str, Any]:
    body = {
        **M,
        "messages": [{"role": "user", "content": FRANCE}],
        "tools": [{"type": "web_search_20250305", "name": "web_search"}],
    }
    return post(ctx, "/v1/messages", body)


@case("m.err.unknown_model", "messages", "an unknown model")
def m_err_unknown_model(ctx: Context) -> dict[str, Any]:
    body = {**M, "model": "no-such-model", "messages": [{"role": "user", "content": FRANCE}]}
    return post(ctx, "/v1/messages", body)


@case("m.err.count_unknown_model", "messages", "count_tokens with an unknown model")
def m_err_count_unknown_model(ctx: Context) -> dict[str, Any]:
    body = {"model": "no-such-model", "messages": [{"role": "user", "content": FRANCE}]}
    return post(ctx, "/v1/messages/count_tokens", body)


# ---------------------------------------------------------------- models


@case("models.retrieve", "models", "GET /v1/models/{id} with a `/` in the id (SDK)")
def models_retrieve(ctx: Context) -> dict[str, Any]:
    record = sdk_call(lambda: ctx.oa.models.with_raw_response.retrieve(MODEL))
    record.pop("parsed", None)
    return record


@case("models.err.unknown", "models", "GET /v1/models/{id} of an unknown model")
def models_err_unknown(ctx: Context) -> dict[str, Any]:
    return of_response(ctx.http.get("/v1/models/no-such-model"))


@case("models.list", "models", "GET /v1/models")
def models_list(ctx: Context) -> dict[str, Any]:
    return of_response(ctx.http.get("/v1/models"))
