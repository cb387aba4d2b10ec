"""What the vLLM backend tells a request's tally (engine.protocol.Tally): output tokens
of vLLM's outputs, those left unread in a request's collector when it ends early, and
the one prompt of a greedy `n > 1` request that runs as `n` engine requests."""

from __future__ import annotations

from typing import Any

from engine.protocol import Tally


def token_count(output: Any) -> int:
    """Output tokens of one vLLM RequestOutput (deltas: all choices that advanced)."""
    return sum(len(completion.token_ids) for completion in output.outputs)


def unread_tokens(queue: Any) -> int:
    """Output tokens waiting in a request's collector (outputs merge there while nobody
    reads); an error waiting there carries none."""
    try:
        pending = queue.get_nowait()
    except Exception:
        return 0
    return 0 if pending is None else token_count(pending)


class OnePrompt:
    """The tally of a greedy `n > 1` request run as `n` engine requests: the prompt is
    one prompt (as the response's usage says), counted when the first of them is taken."""

    __slots__ = ("_counted", "_tally")

    def __init__(self, tally: Tally) -> None:
        self._tally = tally
        self._counted = False

    def accepted(self, prompt_tokens: int) -> None:
        if not self._counted:
            self._counted = True
            self._tally.accepted(prompt_tokens)

    def generated(self, tokens: int) -> None:
        self._tally.generated(tokens)
