"""The grammar compile deadline: a grammar that compiles within it passes (and is not
compiled again), one that does not is a 400 saying why (refused at once the next
time), a grammar xgrammar cannot compile is a 400, and compiles left running past
their deadline never make another request's grammar wait behind them."""

from __future__ import annotations

import asyncio
import json
import threading
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


async def test_when_every_worker_runs_overdue_new_grammars_get_503(
    tokenizer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The overdue compiles run (burning CPU) until the test lets them end: a real one of
    # 600 optional properties takes about a second, and on a loaded machine the first
    # could end while the second waits out its deadline.
    release = threading.Event()
    real_compile = grammar_gate.compile_spec

    def compile_spec(compiler: Any, spec: tuple[str, str]) -> Any:
        if len(spec[1]) < 10_000:
            return real_compile(compiler, spec)
        while not release.wait(0.001):
            sum(range(20_000))  # CPU time for the deadline to see
        return None

    monkeypatch.setattr(grammar_gate, "compile_spec", compile_spec)
    gate = GrammarGate(tokenizer, None, timeout_s=0.05)
    try:
        for count in range(grammar_gate.WORKERS):
            with pytest.raises(EngineRequestError):
                await gate.check(optional_properties(600 + count), "tools")
        assert gate._overdue == grammar_gate.WORKERS
        with pytest.raises(AdmissionRejected) as busy:
            await gate.check(small(), "tools")
        assert busy.value.status == 503 and busy.value.code == "grammar_compiler_busy"
    finally:
        release.set()
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


async def test_a_grammar_given_up_on_while_starved_is_judged_by_its_cpu_time_later(
    tokenizer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A wall-time cap of zero: every compile longer than one poll is given up on, as a
    # compile starved of CPU on a loaded machine would be. Its verdict is "unfinished"
    # only until the compile ends; then its CPU time decides, and it passes.
    monkeypatch.setattr(grammar_gate, "WALL_CAP_MIN_S", 0.0)
    monkeypatch.setattr(grammar_gate, "WALL_CAP_FACTOR", 0)
    gate = GrammarGate(tokenizer, None, timeout_s=30.0)
    slow = optional_properties(600)
    with pytest.raises(EngineRequestError) as raised:
        await gate.check(slow, "response_format")
    assert "more than the 30 s limit" in raised.value.message
    while gate._overdue:
        await asyncio.sleep(0.05)
    await gate.check(slow, "response_format")  # measured now: well within 30 s of CPU
    (took,) = gate._verdicts.values()
    assert 0 < took < 30.0


async def test_a_measured_verdict_is_not_overwritten_by_unfinished(tokenizer: Any) -> None:
    # The compile may end between the waiter's last look and its giving up: the time
    # the compile wrote stays.
    gate = GrammarGate(tokenizer, None, timeout_s=30.0)
    await gate.check(small(), "response_format")
    (key,) = gate._verdicts
    measured = gate._verdicts[key]
    gate._forget_unfinished(key)  # only an unfinished verdict is forgotten
    assert gate._verdicts[key] == measured


def kind(constraint: Any) -> str | None:
    spec = grammar_spec(constraint)
    return spec[0] if spec else None


def tool_call_grammar(parser: str) -> Any:
    from engine.vllm_backend.tool_calls import ToolRequest, structural_tag

    weather = {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
    return structural_tag(ToolRequest([weather], "required"), parser, 368)


async def test_after_the_warm_up_a_tool_call_grammar_compiles_from_the_shared_pieces(
    tokenizer: Any,
) -> None:
    # The bounded string is nearly all of a tool-call grammar's compile; the warm-up
    # compiles it once, and each tool grammar after it reuses it (CPU time, compared
    # with a wide margin: measured 3.4-4 s cold against 0.02-0.05 s warm).
    from engine.vllm_backend.grammar_warmup import skeletons

    parser = "kimi_k2"
    cold = GrammarGate(tokenizer, None, timeout_s=30.0)
    await cold.check(tool_call_grammar(parser), "tools")
    (cold_s,) = cold._verdicts.values()
    warm = GrammarGate(tokenizer, None, timeout_s=30.0)
    warm.warm(skeletons(parser))
    await warm.check(tool_call_grammar(parser), "tools")
    (warm_s,) = warm._verdicts.values()
    assert warm_s < cold_s / 5


def test_the_skeletons_hold_the_default_string_bound_in_each_format() -> None:
    from engine.schema_bounds import DEFAULT_CAPS
    from engine.vllm_backend.grammar_warmup import skeletons

    bound = f'"maxLength": {DEFAULT_CAPS.string}'
    json_only, tagged = skeletons("gemma4"), skeletons("kimi_k2")
    assert [kind(s) for s in json_only] == ["json"]  # no tool-call grammar
    assert [kind(s) for s in tagged] == ["json", "structural_tag"]
    assert bound in tagged[0].json
    assert f'"maxLength":{DEFAULT_CAPS.string}' in tagged[1].structural_tag
