"""Complexity of the engine-side work on a request before it is admitted: schema bounds
and validity, the bounds added to a schema for the token budget, chat-template
rendering of long histories, tokenizing (/tokenize and every prompt), token-id checks,
and xgrammar's parse of regexes and grammars.

Each case runs its worst shape (tests.corpus.adversarial) at n, 2n, 4n and 8n; its CPU
time must grow about linearly (tests.corpus.growth)."""

from __future__ import annotations

from typing import Any

import pytest

from engine.checkpoint import default_model_dir
from engine.errors import EngineRequestError
from engine.protocol import StructuredOutput
from engine.schema_bounds import (
    MAX_SCHEMA_NODES,
    check_schema,
    check_schema_size,
    fit_to_budget,
    forget_valid_schemas,
    worst_case_tokens,
)
from engine.templates import load_template_file, render_chat
from engine.vllm_backend.outputs import check_token_ids
from engine.vllm_backend.structured import _parses
from perf.harness import corpus
from tests.corpus.growth import assert_linear, swallow

SCHEMAS = {
    "wide": corpus.wide_schema,
    "long enum": corpus.long_enum_schema,
    "nested anyOf": corpus.nested_any_of,
    "patterns": corpus.pattern_schema,
    "deep": corpus.deep_schema,
}


@pytest.mark.parametrize("shape", list(SCHEMAS))
def test_schema_size_check_is_linear(shape: str) -> None:
    # Past the bounds too: the walk stops at the first bound passed.
    run = swallow(lambda schema: check_schema_size(schema, "p"), EngineRequestError)
    assert_linear(run, SCHEMAS[shape], 100, max_n=100_000)


@pytest.mark.parametrize("shape", ["wide", "long enum", "nested anyOf", "patterns"])
def test_schema_check_is_linear(shape: str) -> None:
    def first_check(schema: Any) -> None:
        forget_valid_schemas()  # what a schema not seen before costs
        check_schema(schema, "p")

    run = swallow(first_check, EngineRequestError)
    assert_linear(run, SCHEMAS[shape], 50, max_n=MAX_SCHEMA_NODES // 8)


@pytest.mark.parametrize("shape", ["wide", "long enum", "nested anyOf", "patterns"])
def test_fitting_a_schema_to_its_budget_is_linear(shape: str) -> None:
    # The smallest budget: the bounds halve as often as they can. (Depth is bounded
    # before: the size check runs first and refuses more than 32 levels.)
    assert_linear(lambda schema: fit_to_budget(schema, 1), SCHEMAS[shape], 50, max_n=5_000)


def test_worst_case_estimate_is_linear() -> None:
    assert_linear(worst_case_tokens, corpus.nested_any_of, 100)


def test_token_id_checks_are_linear() -> None:
    assert_linear(lambda ids: check_token_ids(ids, 50_000, "prompt"), corpus.token_prompt, 1_000)


# ------------------------------------------------------------------ templates and tokens

SMOLLM2 = load_template_file("smollm2")


def test_rendering_a_long_history_is_linear() -> None:
    assert_linear(lambda messages: render_chat(SMOLLM2, messages), corpus.many_messages, 100)


def test_rendering_many_tool_calls_is_linear() -> None:
    def messages(n: int) -> list[dict[str, Any]]:
        turn = corpus.tool_call_history(corpus.unclosed_arguments(50))
        return [message for _ in range(n) for message in turn]

    assert_linear(lambda m: render_chat(SMOLLM2, m), messages, 100)


def test_continuing_a_long_final_message_is_linear() -> None:
    def messages(n: int) -> list[dict[str, Any]]:
        return [
            {"role": "user", "content": "ab" * n},
            {"role": "assistant", "content": "ab" * n + "c"},
        ]

    assert_linear(
        lambda m: render_chat(SMOLLM2, m, add_generation_prompt=False, continue_final_message=True),
        messages,
        1_000,
        # Up to 1 MB strings at 8n. From about 2 MB each copy is a fresh allocation from
        # the kernel and the time of linear work jumps sixfold across that line: the
        # allocator, not the rendering, would decide the ratio. Quadratic work would
        # take minutes at these sizes.
        max_n=1 << 16,
    )


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    from tokenizers import Tokenizer

    path = default_model_dir() / "tokenizer.json"
    assert path.is_file(), "run `lilac-serve prepare-model`"
    return Tokenizer.from_file(str(path))


TEXTS = {
    "one long word": lambda n: "a" * n,
    "words": lambda n: "lorem ipsum " * (n // 12),
    "digits": lambda n: "7" * n,
    "whitespace": lambda n: " \n\t" * (n // 3),
    "emoji": lambda n: "\N{SLIGHTLY SMILING FACE}" * (n // 4),
}


@pytest.mark.parametrize("shape", list(TEXTS))
def test_tokenizing_is_linear(tokenizer: Any, shape: str) -> None:
    assert_linear(
        lambda text: tokenizer.encode(text, add_special_tokens=False), TEXTS[shape], 1_000
    )


# ------------------------------------------------------------------ regexes and grammars


def _parse(kind: str) -> Any:
    def run(source: str) -> None:
        _parses(StructuredOutput(param="p"), kind, source)

    return swallow(run, EngineRequestError)


@pytest.mark.parametrize(
    "make", [corpus.wide_regex, corpus.starred_regex], ids=["alternatives", "stars"]
)
def test_regex_parse_is_linear(make: Any) -> None:
    # Up to the regex bound (4,096 characters).
    assert_linear(_parse("from_regex"), make, 20, max_n=80)


def test_grammar_parse_is_linear() -> None:
    # Up to the grammar bound (65,536 characters): about 4,000 rules.
    assert_linear(_parse("from_ebnf"), corpus.wide_grammar, 50, max_n=500)


def test_deeply_nested_regexes_and_grammars_are_refused_not_crashed() -> None:
    for kind, source in (
        ("from_regex", "(" * 3_000 + "a" + ")" * 3_000),
        ("from_ebnf", "root ::= " + "(" * 30_000 + '"a"' + ")" * 30_000),
    ):
        with pytest.raises(EngineRequestError):
            _parses(StructuredOutput(param="p"), kind, source)
