"""The prompt bound, with the default model's real tokenizer: a text longer than the
context times the longest vocabulary entry is refused without being tokenized, the
fewest tokens it claims is never more than the tokenizer makes, a request that
truncates its prompt is let through, and a tokenizer that normalizes gets no bound."""

from __future__ import annotations

import random
from typing import Any

import pytest
from tokenizers import Tokenizer, models, normalizers
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from engine.checkpoint import default_model_dir
from engine.errors import ContextLengthExceeded
from engine.prompt_bound import PromptBound, prompt_bound
from engine.protocol import GenerateRequest, SamplingOptions
from engine.vllm_backend.encoding import encoder
from engine.vllm_backend.prompts import Prompts

MAX_MODEL_LEN = 64


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return AutoTokenizer.from_pretrained(str(default_model_dir()))


@pytest.fixture(scope="module")
def bound(tokenizer: Any) -> PromptBound:
    found = prompt_bound(tokenizer, MAX_MODEL_LEN)
    assert found is not None
    return found


def test_the_bound_is_the_longest_vocabulary_entry(tokenizer: Any, bound: PromptBound) -> None:
    assert bound.max_token_chars == max(len(entry) for entry in tokenizer.get_vocab())
    assert bound.max_model_len == MAX_MODEL_LEN


def test_the_fewest_tokens_claimed_is_never_more_than_the_tokenizer_makes(
    tokenizer: Any, bound: PromptBound
) -> None:
    encode = encoder(tokenizer)
    vocab = list(tokenizer.get_vocab())
    longest = max(vocab, key=len).replace("Ġ", " ").replace("Ċ", "\n")
    rng = random.Random(7)
    texts = [longest * 40, "a" * 9000, " ".join(rng.choices(vocab, k=3000))]
    texts.append("".join(chr(rng.randrange(32, 0x2FFF)) for _ in range(6000)))
    for text in texts:
        fewest = -(-len(text) // bound.max_token_chars)
        assert len(encode(text, False)) >= fewest


def test_too_long_a_text_is_refused_untokenized(tokenizer: Any, bound: PromptBound) -> None:
    calls: list[int] = []

    def encode(text: str, add_special_tokens: bool) -> list[int]:
        calls.append(len(text))
        return [1] * (len(text) // 4)

    prompts = Prompts("", {}, encode, None, bound)
    limit = MAX_MODEL_LEN * bound.max_token_chars
    over = GenerateRequest(
        request_id="r", prompt="x" * (limit + 1), sampling=SamplingOptions(max_tokens=5)
    )
    with pytest.raises(ContextLengthExceeded) as refused:
        prompts.token_ids(over)
    assert calls == []  # never tokenized
    error = refused.value
    assert error.at_least and error.code == "context_length_exceeded"
    assert error.prompt_tokens == -(-(limit + 1) // bound.max_token_chars) > MAX_MODEL_LEN
    assert "at least" in error.message

    with pytest.raises(ContextLengthExceeded):  # /tokenize and count_tokens: the same
        prompts.tokenize(
            prompt="x" * (limit + 1),
            messages=None,
            add_special_tokens=True,
            add_generation_prompt=True,
        )
    assert calls == []

    # At the bound, and a request that keeps only its last tokens: tokenized.
    sampling = SamplingOptions(max_tokens=5)
    prompts.token_ids(GenerateRequest(request_id="r", prompt="x" * limit, sampling=sampling))
    truncating = GenerateRequest(
        request_id="r", prompt="x" * (limit + 1), sampling=sampling, truncate_prompt_tokens=8
    )
    prompts.token_ids(truncating)
    assert calls == [limit, limit + 1]


def test_a_normalizing_tokenizer_gets_no_bound() -> None:
    backend = Tokenizer(models.WordLevel({"a": 0, "[UNK]": 1}, unk_token="[UNK]"))
    backend.normalizer = normalizers.NFKC()
    normalizing = PreTrainedTokenizerFast(tokenizer_object=backend)
    assert prompt_bound(normalizing, MAX_MODEL_LEN) is None
    backend.normalizer = None
    plain = PreTrainedTokenizerFast(tokenizer_object=backend)
    assert prompt_bound(plain, MAX_MODEL_LEN) == PromptBound(MAX_MODEL_LEN, len("[UNK]"))
