"""The grammar compile deadline: a grammar that compiles within it passes (and is not
compiled again), one that does not is a 400 saying why (refused at once the next
time), a grammar xgrammar cannot compile is a 400, and compiles left running past
their deadline never make another request's grammar wait behind them."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from engine.checkpoint import default_model_dir
from engine.errors import AdmissionRejected, EngineRequestError
from engine.vllm_backend import grammar_gate
from engine.vllm_backend.grammar_gate import GrammarGate, grammar_spec


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    from vllm.tokenizers import get_tokenizer

    source = default_model_dir()
    assert (source / "tokenizer.json").is_file(), "run `lilac-serve prepare-model`"
    return get_tokenizer(str(source))


def optional_properties(count: int) -> Any:
    """A bounded object of `count` optional integers: compile time about quadratic in it."""
    from vllm.sampling_params import StructuredOutputsParams

    properties = {f"p{i}": {"type": "integer", "minimum": 0, "maximum": 9} for i in range(count)}
    schema = {"type": "object", "properties": properties, "additionalProperties": False}
    return StructuredOutputsParams(json=json.dumps(schema))


def small() -> Any:
    from vllm.sampling_params import StructuredOutputsParams

    return StructuredOutputsParams(json=json.dumps({"type": "object", "properties": {}}))


async def test_a_grammar_within_the_deadline_passes_and_is_remembered(tokenizer: Any) -> None:
    gate = GrammarGate(tokenizer, None, timeout_s=30.0)
    await gate.check(small(), "response_format")
    key = next(iter(gate._verdicts))
    assert gate._verdicts[key] < 30.0
    await gate.check(small(), "response_format")  # answered from the verdict
    assert list(gate._verdicts) == [key]
    await gate.check(None, "response_format")  # free output: nothing to compile


async def test_a_slow_grammar_is_a_400_that_says_why_and_stays_refused(tokenizer: Any) -> None:
    # Compiling 600 optional properties takes most of a second here: far over the deadline.
    gate = GrammarGate(tokenizer, None, timeout_s=0.05)
    slow = optional_properties(600)
    with pytest.raises(EngineRequestError) as raised:
        await gate.check(slow, "response_format")
    error = raised.value
    assert error.code == "grammar_too_complex"
    assert error.param == "response_format"
    assert "too long to compile" in error.message and "optional properties" in error.message
    assert gate._overdue == 1  # still compiling, in its thread
    with pytest.raises(EngineRequestError):  # refused from the verdict, no second compile
        await gate.check(slow, "response_format")
    assert gate._overdue == 1
    while gate._overdue:  # the compile ends; its measured time replaces "unfinished"
        await asyncio.sleep(0.05)
    with pytest.raises(EngineRequestError) as again:
        await gate.check(slow, "response_format")
    assert "over the 0.05 s limit" in again.value.message


async def test_when_every_worker_runs_overdue_new_grammars_get_503(tokenizer: Any) -> None:
    gate = GrammarGate(tokenizer, None, timeout_s=0.05)
    for count in range(grammar_gate.WORKERS):
        with pytest.raises(EngineRequestError):
            await gate.check(optional_properties(600 + count), "tools")
    with pytest.raises(AdmissionRejected) as busy:
        await gate.check(small(), "tools")
    assert busy.value.status == 503 and busy.value.code == "grammar_compiler_busy"
    while gate._overdue:
        await asyncio.sleep(0.05)
    gate.timeout_s = 30.0
    await gate.check(small(), "tools")  # workers free again: compiled and passed


@pytest.mark.parametrize(
    "fields",
    [{"regex": "[unclosed"}, {"grammar": "root ::= undefined_rule"}],
)
async def test_a_grammar_xgrammar_cannot_compile_is_a_400(
    tokenizer: Any, fields: dict[str, str]
) -> None:
    from vllm.sampling_params import StructuredOutputsParams

    gate = GrammarGate(tokenizer, None, timeout_s=30.0)
    with pytest.raises(EngineRequestError) as raised:
        await gate.check(StructuredOutputsParams(**fields), "structured_outputs")
    assert raised.value.param == "structured_outputs"


def test_the_spec_is_what_the_engine_compiles() -> None:
    from vllm.sampling_params import StructuredOutputsParams

    assert grammar_spec(StructuredOutputsParams(json={"type": "integer"})) == (
        "json",
        '{"type": "integer"}',
    )
    assert grammar_spec(StructuredOutputsParams(json_object=True)) == (
        "json",
        '{"type": "object"}',
    )
    assert grammar_spec(StructuredOutputsParams(regex="a+")) == ("regex", "a+")
    assert grammar_spec(StructuredOutputsParams(choice=["a", "b"])) is None
