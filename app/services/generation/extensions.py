"""vLLM extensions: the refused ones (a 400 naming the field whenever its value would
change the output) and the constraints outside `response_format` (`structured_outputs`
and the older `guided_*` fields), turned into one engine `StructuredOutput`."""

from __future__ import annotations

import json
from typing import Any, TypedDict

import msgspec

from app.errors import InvalidRequest
from app.schemas.extensions import StructuredOutputFields, StructuredOutputsSpec
from engine.protocol import StructuredOutput
from engine.schema_bounds import check_schema

# Field -> the values that leave the output as vLLM's default would (UNSET: not sent).
REFUSED: dict[str, tuple[Any, ...]] = {
    "use_beam_search": (False,),
    "length_penalty": (1.0,),
    "watermarking": (False,),
    "spaces_between_special_tokens": (True,),
    "truncation_side": ("left",),
    "logprob_token_ids": (),
    "prompt_embeds": (),
    "return_tokens_as_token_ids": (False,),
    "return_token_ids": (False,),
    "return_token_offsets": (False,),
    "return_prompt_text": (False,),
    "routed_experts_prompt_start": (0,),
    "mm_payload": (),
    "return_mm_kwargs": (False,),
    "kv_transfer_params": (),
    "ec_transfer_params": (),
    "vllm_xargs": (),
    "repetition_detection": (),
    "thinking_token_budget": (),
    "chat_template": (),
    "media_io_kwargs": (),
    "mm_processor_kwargs": (),
    "include_reasoning": (True,),
    "suffix": ("",),
}


def check_refused(request: msgspec.Struct) -> None:
    """A 400 naming the first refused extension set to a value that would matter."""
    for name, harmless in REFUSED.items():
        value = getattr(request, name, None)  # each endpoint declares its own subset
        if value is msgspec.UNSET or value is None:
            continue
        if any(type(value) is type(ok) and value == ok for ok in harmless):
            continue
        raise InvalidRequest(f"`{name}` is not supported by this server.", param=name)
    stream_options = getattr(request, "stream_options", None)
    if stream_options is not None and stream_options.continuous_usage_stats:
        raise InvalidRequest(
            "`stream_options.continuous_usage_stats` is not supported by this server.",
            param="stream_options.continuous_usage_stats",
        )


def _schema(value: dict[str, Any] | str, param: str) -> dict[str, Any]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise InvalidRequest(f"`{param}` is not valid JSON.", param=param) from None
        if not isinstance(value, dict):
            raise InvalidRequest(f"`{param}` must be a JSON schema object.", param=param)
    check_schema(value, param)
    return value


def _tag(value: dict[str, Any] | str) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _from_spec(spec: StructuredOutputsSpec) -> StructuredOutput:
    base = "structured_outputs"
    if spec.disable_additional_properties or spec.whitespace_pattern is not None:
        name = (
            "disable_additional_properties"
            if spec.disable_additional_properties
            else ("whitespace_pattern")
        )
        raise InvalidRequest(f"`{base}.{name}` is not supported.", param=f"{base}.{name}")
    given = [
        name
        for name in ("json", "regex", "choice", "grammar", "json_object", "structural_tag")
        if getattr(spec, name) is not None
    ]
    if len(given) != 1:
        raise InvalidRequest(
            "`structured_outputs` takes exactly one of `json`, `regex`, `choice`, `grammar`, "
            f"`json_object` or `structural_tag`; got {len(given)}.",
            param=base,
        )
    name = given[0]
    param = f"{base}.{name}"
    if spec.json is not None:
        return StructuredOutput(schema=_schema(spec.json, param), param=param)
    if spec.json_object is not None:
        if not spec.json_object:
            raise InvalidRequest(f"`{param}` must be true when given.", param=param)
        return StructuredOutput(param=param)
    if spec.structural_tag is not None:
        return StructuredOutput(structural_tag=_tag(spec.structural_tag), param=param)
    return StructuredOutput(choice=spec.choice, regex=spec.regex, grammar=spec.grammar, param=param)


def _from_guided(request: StructuredOutputFields) -> list[StructuredOutput]:
    found = []
    if request.guided_json is not None:
        schema = _schema(request.guided_json, "guided_json")
        found.append(StructuredOutput(schema=schema, param="guided_json"))
    if request.guided_regex is not None:
        found.append(StructuredOutput(regex=request.guided_regex, param="guided_regex"))
    if request.guided_choice is not None:
        found.append(StructuredOutput(choice=request.guided_choice, param="guided_choice"))
    if request.guided_grammar is not None:
        found.append(StructuredOutput(grammar=request.guided_grammar, param="guided_grammar"))
    return found


def structured_output(
    request: StructuredOutputFields, response_format: StructuredOutput | None
) -> StructuredOutput | None:
    """The one constraint of a request; two (from any of `response_format`,
    `structured_outputs`, `guided_*`) are a 400 naming the second."""
    if request.guided_whitespace_pattern is not None:
        raise InvalidRequest(
            "`guided_whitespace_pattern` is not supported.", param="guided_whitespace_pattern"
        )
    found = [response_format] if response_format is not None else []
    if request.structured_outputs is not None:
        found.append(_from_spec(request.structured_outputs))
    found.extend(_from_guided(request))
    if len(found) > 1:
        first, second = found[0].param.split(".")[0], found[1].param
        raise InvalidRequest(
            f"Only one output constraint per request: `{second}` cannot be combined with "
            f"`{first}`.",
            param=second,
        )
    return found[0] if found else None


class ExtensionFields(TypedDict):
    """GenerateRequest keyword arguments, so that unpacking them into it type-checks."""

    response_format: StructuredOutput | None
    truncate_prompt_tokens: int | None
    add_special_tokens: bool | None
    cache_salt: str | None


def extension_fields(
    request: StructuredOutputFields, response_format: StructuredOutput | None = None
) -> ExtensionFields:
    """GenerateRequest fields of the implemented prompt extensions and the constraint."""
    return {
        "response_format": structured_output(request, response_format),
        "truncate_prompt_tokens": getattr(request, "truncate_prompt_tokens", None),
        "add_special_tokens": getattr(request, "add_special_tokens", None),
        "cache_salt": getattr(request, "cache_salt", None),
    }
