"""vLLM's outputs and objects -> the engine-neutral types of engine.protocol: choice
deltas, finish reasons and tool calls, plus what the AsyncLLM can take (images, KV cache
tokens) and token-id checks."""

from __future__ import annotations

import logging
from typing import Any

from engine.errors import EngineRequestError
from engine.protocol import ChoiceDelta
from engine.vllm_backend.logprobs import convert_sample_logprobs
from engine.vllm_backend.reasoning import RequestParsing
from engine.vllm_backend.tool_calls import ToolCallStream, ToolRequest

log = logging.getLogger("lilac.engine")


class OutputConversion:
    """One request's outputs, each a vLLM RequestOutput (delta kind) -> its choice deltas:
    text, token count, finish reason and logprobs, reasoning split off, tool calls parsed
    (one parser per choice). The per-token path of every streamed request."""

    def __init__(
        self,
        parsing: RequestParsing,
        top_k: int,
        tools: ToolRequest | None,
        tool_parser: str,
        tokenizer: Any,
    ) -> None:
        self._parsing = parsing
        self._top_k = top_k
        self._tools = tools
        self._tool_parser = tool_parser
        self._tokenizer = tokenizer
        self._parsers: dict[int, ToolCallStream] = {}

    def choices(self, output: Any) -> list[ChoiceDelta]:
        choices = [
            self._parsing.apply(choice_delta(completion, self._top_k), completion.token_ids)
            for completion in output.outputs
        ]
        if self._tools is not None:
            for choice, completion in zip(choices, output.outputs, strict=True):
                parser = self._parsers.get(choice.index)
                if parser is None:
                    parser = ToolCallStream(self._tool_parser, self._tools, self._tokenizer)
                    self._parsers[choice.index] = parser
                parse_tool_calls(choice, completion.token_ids, parser)
        return choices


def choice_delta(completion: Any, top_k: int) -> ChoiceDelta:
    return ChoiceDelta(
        index=completion.index,
        text=completion.text,
        token_count=len(completion.token_ids),
        finish_reason=finish_reason_of(completion.finish_reason),
        logprobs=convert_sample_logprobs(completion.token_ids, completion.logprobs, top_k),
    )


def parse_tool_calls(choice: ChoiceDelta, token_ids: Any, parser: ToolCallStream) -> None:
    """Move the choice's text through the tool-call parser: content stays, calls split off."""
    content, calls = parser.feed(choice.text, list(token_ids))
    if choice.finish_reason is not None:
        calls.extend(parser.finish())
        if parser.called and choice.finish_reason == "stop":
            choice.finish_reason = "tool_calls"
    choice.text = content
    choice.tool_calls = calls or None


def takes_images(llm: Any) -> bool:
    """Whether the served model takes image input (a multi-modal model with an image
    processor, and images not turned off by its limits)."""
    model_config = llm.model_config
    if not model_config.is_multimodal_model:
        return False
    processor = getattr(llm.renderer, "mm_processor", None)
    if processor is None:
        return False
    try:
        if "image" not in processor.info.get_supported_mm_limits():
            return False
        return model_config.multimodal_config.get_limit_per_prompt("image") > 0
    except Exception:  # a processor that cannot say: assume no
        log.exception("could not tell whether the model takes images")
        return False


def check_token_ids(token_ids: list[int], vocab_size: int, param: str) -> None:
    for token_id in token_ids:
        if not 0 <= token_id < vocab_size:
            raise EngineRequestError(
                f"Token id {token_id} is outside the model's vocabulary (0..{vocab_size - 1}).",
                param=param,
            )


def finish_reason_of(reason: str | None) -> Any:
    if reason is None:
        return None
    return "length" if reason == "length" else "stop"


def kv_cache_tokens(llm: Any) -> int:
    """Tokens the KV cache holds (the admission controller's token budget)."""
    cache = llm.vllm_config.cache_config
    return (cache.num_gpu_blocks or 0) * cache.block_size
