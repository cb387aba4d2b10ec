"""A prompt too long for the context, found before it is tokenized.

No token of a tokenizer spans more characters than its longest vocabulary entry, so a
text of more than `max_model_len` times that many characters has more tokens than the
context holds, whatever they are. Tokenizing such a text in full (seconds for a few
megabytes, on the thread pool every tenant's prompts share) would only end in the same
refusal. A tokenizer that normalizes its input first (which may drop or merge
characters) gets no bound.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.errors import ContextLengthExceeded


@dataclass(frozen=True, slots=True)
class PromptBound:
    max_model_len: int
    max_token_chars: int  # the most characters one token covers

    def check(self, text: str, requested_output: int | None) -> None:
        """ContextLengthExceeded, with the fewest tokens `text` can be, when even that
        is more than the context holds."""
        if len(text) > self.max_model_len * self.max_token_chars:
            fewest = -(-len(text) // self.max_token_chars)
            raise ContextLengthExceeded(fewest, requested_output, self.max_model_len, at_least=True)


def prompt_bound(tokenizer: Any, max_model_len: int) -> PromptBound | None:
    """The bound of a Hugging Face tokenizer with a `tokenizers` backend and no
    normalizer; None for any other."""
    backend = getattr(tokenizer, "_tokenizer", None)
    if backend is None or getattr(backend, "normalizer", True) is not None or max_model_len < 1:
        return None
    longest = max(map(len, tokenizer.get_vocab()), default=0)
    return PromptBound(max_model_len, longest) if longest > 0 else None
