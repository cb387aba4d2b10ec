"""Micro-benchmarks of the per-token path through the real engine's output conversion.

Each round feeds one request's outputs, vLLM `RequestOutput`s of the delta kind (one
token each, as a decode step yields them), through `OutputConversion`: the code the
vLLM engine runs for every output of every streamed request (choice delta, finish
reason, logprobs, the family's reasoning split, the tool-call parser). The outputs are
real vLLM objects built by hand from the real tokenizer's tokens, no engine started.
Divide by extra_info["units"] (the compare script does) for the cost of one token.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine.checkpoint import default_model_dir
from engine.families import get as family_named
from engine.families.base import resolve
from engine.vllm_backend.outputs import OutputConversion
from engine.vllm_backend.reasoning import OutputParsing, RequestParsing
from engine.vllm_backend.tool_calls import ToolRequest
from perf.harness.family_model import make_family_checkpoint

PLAIN_TEXT = (
    "The capital of France is Paris. It lies on the Seine, in the north of the country, "
    "and has been the seat of government for most of the last thousand years. Its "
    "museums, cafes and boulevards draw millions of visitors every year."
)
TOOL_TEXT = (
    'Let me check.<tool_call>\n{"name": "get_weather", "arguments": '
    '{"city": "Paris", "unit": "celsius", "days": 3}}\n</tool_call>'
)
REASONING_TEXT = (
    "The user asks for the capital of France. That is Paris; no doubt about it, so I "
    "answer briefly.</think>The capital of France is Paris."
)
TOOLS = ToolRequest(
    [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}], "auto"
)
TOP_LOGPROBS = 5


def _tokenizer(path: Path) -> Any:
    from vllm.tokenizers import get_tokenizer

    return get_tokenizer(str(path))


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return _tokenizer(default_model_dir())


@pytest.fixture(scope="module")
def family_tokenizer() -> Iterator[Any]:
    """SmolLM2's tokenizer with the families' markers as single tokens (the same copy
    the family tests serve)."""
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = make_family_checkpoint(default_model_dir(), Path(tmp) / "ckpt")
        yield _tokenizer(checkpoint)


def request_outputs(tokenizer: Any, text: str, top_logprobs: int = 0) -> list[Any]:
    """One delta RequestOutput per token of `text`, text decoded incrementally, the last
    one finished; with `top_logprobs`, each carries that many ranked alternatives."""
    from vllm.logprobs import Logprob
    from vllm.outputs import CompletionOutput, RequestOutput

    ids = tokenizer.encode(text, add_special_tokens=False)
    outputs = []
    previous = ""
    for position, token_id in enumerate(ids):
        decoded = tokenizer.decode(ids[: position + 1])
        piece, previous = decoded[len(previous) :], decoded
        logprobs = None
        if top_logprobs:
            entries = {token_id: Logprob(-0.1, 1, tokenizer.decode([token_id]))}
            for rank in range(2, top_logprobs + 2):
                other = (token_id + rank * 7919) % tokenizer.vocab_size
                entries.setdefault(other, Logprob(-rank * math.e, rank, tokenizer.decode([other])))
            logprobs = [entries]
        last = position == len(ids) - 1
        completion = CompletionOutput(
            index=0,
            text=piece,
            token_ids=[token_id],
            cumulative_logprob=None,
            logprobs=logprobs,
            finish_reason="stop" if last else None,
        )
        outputs.append(RequestOutput(f"req-{position}", None, [1, 2, 3], None, [completion], last))
    return outputs


def _bench(benchmark: Any, outputs: list[Any], make: Any) -> None:
    def convert() -> list[Any]:
        conversion = make()
        return [conversion.choices(output) for output in outputs]

    choices = [c for step in convert() for c in step]
    assert len(choices) == len(outputs) and choices[-1].finish_reason is not None
    benchmark.extra_info["units"] = len(outputs)
    benchmark.extra_info["unit"] = "token"
    benchmark(convert)


def _plain(tokenizer: Any, top_k: int = 0, tools: ToolRequest | None = None) -> Any:
    parsing = OutputParsing(None, tokenizer)
    return lambda: OutputConversion(RequestParsing(parsing, {}), top_k, tools, "hermes", tokenizer)


def test_engine_output_plain_per_token(benchmark: Any, tokenizer: Any) -> None:
    outputs = request_outputs(tokenizer, PLAIN_TEXT)
    text = "".join(c.text for o in outputs for c in _plain(tokenizer)().choices(o))
    assert text == PLAIN_TEXT
    _bench(benchmark, outputs, _plain(tokenizer))


def test_engine_output_logprobs_per_token(benchmark: Any, tokenizer: Any) -> None:
    outputs = request_outputs(tokenizer, PLAIN_TEXT, TOP_LOGPROBS)
    (choice,) = _plain(tokenizer, TOP_LOGPROBS)().choices(outputs[0])
    assert choice.logprobs is not None and len(choice.logprobs[0].top) == TOP_LOGPROBS
    _bench(benchmark, outputs, _plain(tokenizer, TOP_LOGPROBS))


def test_engine_output_tool_call_per_token(benchmark: Any, tokenizer: Any) -> None:
    outputs = request_outputs(tokenizer, TOOL_TEXT)
    conversion = _plain(tokenizer, tools=TOOLS)()
    calls = [call for o in outputs for c in conversion.choices(o) for call in c.tool_calls or []]
    assert calls and calls[0].name == "get_weather"
    _bench(benchmark, outputs, _plain(tokenizer, tools=TOOLS))


def test_engine_output_reasoning_per_token(benchmark: Any, family_tokenizer: Any) -> None:
    """GLM's reasoning parser (thinking on: the prompt opened `<think>`)."""
    family = family_named("glm45")
    parsing = OutputParsing(family, family_tokenizer)
    _, settings = resolve(family, {}, {})
    prompt_ids = family_tokenizer.encode("<|user|>Capital of France?<|assistant|><think>")
    outputs = request_outputs(family_tokenizer, REASONING_TEXT)

    def make() -> OutputConversion:
        return OutputConversion(
            RequestParsing(parsing, settings, prompt_ids), 0, None, "glm47", family_tokenizer
        )

    conversion = make()
    choices = [c for o in outputs for c in conversion.choices(o)]
    assert "".join(c.reasoning or "" for c in choices).startswith("The user asks")
    assert "".join(c.text for c in choices) == "The capital of France is Paris."
    _bench(benchmark, outputs, make)
