"""The backend's encode gives the tokenizer's own `encode` ids, special tokens or not."""

from __future__ import annotations

from typing import Any

import pytest

from engine.checkpoint import default_model_dir
from engine.vllm_backend.encoding import encoder

TEXTS = [
    "",
    "hello world",
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
    "  runs   of \n\n\t whitespace, é ü 日本語 and emoji 🙂",
    "lorem ipsum " * 2000,
]


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    from vllm.tokenizers import get_tokenizer

    source = default_model_dir()
    assert (source / "tokenizer.json").is_file(), "run `lilac-serve prepare-model`"
    return get_tokenizer(str(source))


@pytest.mark.parametrize("add_special_tokens", [True, False])
def test_same_ids_as_the_tokenizer(tokenizer: Any, add_special_tokens: bool) -> None:
    encode = encoder(tokenizer)
    for text in TEXTS:
        expected = tokenizer.encode(text, add_special_tokens=add_special_tokens)
        assert encode(text, add_special_tokens) == expected


def test_a_tokenizer_without_a_rust_backend_encodes_through_its_own_encode(
    tokenizer: Any,
) -> None:
    class Plain:  # the shape of a tokenizer with no `tokenizers` backend
        def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
            return list(tokenizer.encode(text, add_special_tokens=add_special_tokens))

    assert encoder(Plain())("hello world", False) == tokenizer.encode(
        "hello world", add_special_tokens=False
    )
