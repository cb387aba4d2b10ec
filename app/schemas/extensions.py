"""vLLM's request extensions, as `vllm serve` clients send them (usually in `extra_body`).

Implemented ones are typed and bounded here. The ones lilac-serve does not implement
are declared too, so that a value that would change the output is a 400 naming the
field (`app.services.generation.extensions`) instead of being ignored like an unknown field.
"""

from __future__ import annotations

from typing import Annotated, Any

from msgspec import UNSET, Meta, Struct

TokenId = Annotated[int, Meta(ge=0)]
# Grammars are compiled by xgrammar when the request is admitted: bounded in size so that
# one request cannot hold the compiler for long.
MAX_GRAMMAR_CHARS = 65_536
MAX_REGEX_CHARS = 4_096
MAX_CHOICES = 256
MAX_CHOICE_CHARS = 1_024

# vLLM's bound on logprobs of any kind (its `max_logprobs` default, kept by the engine);
# vLLM's -1 (the whole vocabulary) is outside it.
MAX_PROMPT_LOGPROBS = 20
PromptLogprobsCount = Annotated[int, Meta(ge=0, le=MAX_PROMPT_LOGPROBS)]

Regex = Annotated[str, Meta(min_length=1, max_length=MAX_REGEX_CHARS)]
Grammar = Annotated[str, Meta(min_length=1, max_length=MAX_GRAMMAR_CHARS)]
ChoiceText = Annotated[str, Meta(min_length=1, max_length=MAX_CHOICE_CHARS)]
Choices = Annotated[list[ChoiceText], Meta(min_length=1, max_length=MAX_CHOICES)]
# A structural tag as vLLM takes it: a JSON string, or the object itself.
StructuralTag = Annotated[str, Meta(min_length=1, max_length=MAX_GRAMMAR_CHARS)] | dict[str, Any]
JsonSchemaOrString = dict[str, Any] | Annotated[str, Meta(max_length=MAX_GRAMMAR_CHARS)]


class StructuredOutputsSpec(Struct, kw_only=True):
    """vLLM's `structured_outputs`: exactly one constraint."""

    json: JsonSchemaOrString | None = None
    regex: Regex | None = None
    choice: Choices | None = None
    grammar: Grammar | None = None
    json_object: bool | None = None
    structural_tag: StructuralTag | None = None
    # The JSON is always written without free whitespace here (that keeps a small model
    # from running on inside it); `disable_any_whitespace: true` asks for exactly that.
    disable_any_whitespace: bool = False
    # Options that change what the grammar admits; not implemented (a 400 when set).
    disable_additional_properties: bool = False
    whitespace_pattern: str | None = None


class StructuredOutputFields(Struct, kw_only=True):
    """Constraints outside `response_format`, on both generation endpoints."""

    structured_outputs: StructuredOutputsSpec | None = None
    # The older top-level spellings (vLLM before 0.11); still sent by many clients.
    guided_json: JsonSchemaOrString | None = None
    guided_regex: Regex | None = None
    guided_choice: Choices | None = None
    guided_grammar: Grammar | None = None
    guided_decoding_backend: str | None = None  # accepted: xgrammar is the one backend here
    guided_whitespace_pattern: str | None = None  # not implemented (a 400 when set)


class VLLMExtensionFields(StructuredOutputFields, kw_only=True):
    """vLLM extensions both generation endpoints take, implemented or refused."""

    truncate_prompt_tokens: Annotated[int, Meta(ge=-1)] | None = None
    allowed_token_ids: Annotated[list[TokenId], Meta(min_length=1)] | None = None
    bad_words: Annotated[list[Annotated[str, Meta(min_length=1)]], Meta(max_length=256)] | None = (
        None
    )
    add_special_tokens: bool | None = None
    # Prefix-cache isolation: requests reuse cached prompt blocks only of requests with
    # the same salt (with keys, within the key's own scope: app.tenancy.keys.isolation).
    # Bounded as `vllm serve` bounds it.
    cache_salt: Annotated[str, Meta(min_length=1, max_length=128)] | None = None
    # Accepted, with no effect on the output: how often chunks go out, tracing ids.
    stream_interval: Annotated[int, Meta(ge=1)] | None = None
    request_id: str | None = None
    session_id: str | None = None
    # Each prompt token's logprob and the k most likely tokens at its place (whole
    # responses only: a 400 with `stream`, as `vllm serve` refuses them there).
    prompt_logprobs: PromptLogprobsCount | None = None
    # Refused unless left at vLLM's default (app.services.generation.extensions.REFUSED).
    use_beam_search: Any = UNSET
    length_penalty: Any = UNSET
    watermarking: Any = UNSET
    spaces_between_special_tokens: Any = UNSET
    truncation_side: Any = UNSET
    logprob_token_ids: Any = UNSET
    prompt_embeds: Any = UNSET
    return_tokens_as_token_ids: Any = UNSET
    return_token_ids: Any = UNSET
    return_token_offsets: Any = UNSET
    routed_experts_prompt_start: Any = UNSET
    mm_payload: Any = UNSET
    return_mm_kwargs: Any = UNSET
    kv_transfer_params: Any = UNSET
    ec_transfer_params: Any = UNSET
    vllm_xargs: Any = UNSET
    repetition_detection: Any = UNSET
    thinking_token_budget: Any = UNSET


class PromptLogprob(Struct, omit_defaults=True):
    """vLLM's `Logprob` in `prompt_logprobs`: one token's logprob at a prompt position,
    under its token id (a string key, as JSON object keys are)."""

    logprob: float
    rank: int | None  # in the whole vocabulary; 1: the most likely
    decoded_token: str | None


# One entry per prompt token; the first is null (nothing predicted it). Each maps the
# prompt token's id and the ids of the k most likely tokens there (at most k + 1 keys).
PromptLogprobs = list[dict[str, PromptLogprob] | None]
