"""Micro-benchmarks of the per-request and per-token hot paths (no I/O).

Run with `make bench` (or `pytest perf`); `pytest` alone does not collect them.
"""

from __future__ import annotations

from typing import Any

from app.schemas.chat import ChatCompletionChunk, ChunkChoice, Delta, chat_request_decoder
from app.services.chat.service import messages_for_template
from app.services.generation.sampling import sampling_options
from app.transport.sse import frame
from engine.templates import render_chat
from perf.micro import payloads

SPECIAL = {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>"}


def _decode_and_prepare(body: bytes) -> Any:
    request = chat_request_decoder.decode(body)
    max_tokens = request.max_completion_tokens or request.max_tokens
    return messages_for_template(request.messages), sampling_options(request, max_tokens=max_tokens)


def test_decode_request_plain(benchmark: Any) -> None:
    body = payloads.encode(payloads.plain_request())
    benchmark(_decode_and_prepare, body)


def test_decode_request_long_history(benchmark: Any) -> None:
    body = payloads.encode(payloads.long_history_request())
    benchmark.extra_info["body_bytes"] = len(body)
    benchmark(_decode_and_prepare, body)


def test_decode_request_tools(benchmark: Any) -> None:
    body = payloads.encode(payloads.tools_request())
    benchmark(_decode_and_prepare, body)


def test_sse_frame_one_chunk(benchmark: Any) -> None:
    chunk = ChatCompletionChunk(
        id="chatcmpl-0123456789abcdef0123456789abcdef",
        created=1_700_000_000,
        model="HuggingFaceTB/SmolLM2-135M-Instruct",
        choices=[ChunkChoice(index=0, delta=Delta(content=" world"))],
    )
    benchmark(frame, chunk)


def test_render_template_short(benchmark: Any) -> None:
    messages = payloads.template_messages(payloads.plain_request())
    benchmark(render_chat, payloads.SMOLLM2_TEMPLATE, messages, special_tokens=SPECIAL)


def test_render_template_long_history(benchmark: Any) -> None:
    messages = payloads.template_messages(payloads.long_history_request())
    benchmark(render_chat, payloads.SMOLLM2_TEMPLATE, messages, special_tokens=SPECIAL)


TOOL_CALL_TEXT = (
    'Let me check.<tool_call>\n{"name": "get_weather", "arguments": '
    '{"city": "Paris", "unit": "celsius", "days": 3}}\n</tool_call>'
)


def _tool_call_parser() -> Any:
    from transformers import AutoTokenizer

    from engine.checkpoint import default_model_dir
    from engine.vllm_backend.tool_calls import ToolCallStream, ToolRequest

    tokenizer = AutoTokenizer.from_pretrained(default_model_dir())
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]
    pieces = [tokenizer.decode([t]) for t in tokenizer.encode(TOOL_CALL_TEXT)]
    ids = [[t] for t in tokenizer.encode(TOOL_CALL_TEXT)]
    return lambda: ToolCallStream("hermes", ToolRequest(tools, "auto"), tokenizer), pieces, ids


def test_parse_tool_call_stream(benchmark: Any) -> None:
    """The output parser over one streamed tool call (vLLM's hermes parser): divide by
    extra_info["deltas"] for the cost per delta."""
    make, pieces, ids = _tool_call_parser()

    def parse() -> None:
        stream = make()
        for piece, piece_ids in zip(pieces, ids, strict=True):
            stream.feed(piece, piece_ids)
        stream.finish()

    benchmark.extra_info["deltas"] = len(pieces)
    benchmark(parse)


def test_admission_decision(benchmark: Any) -> None:
    """One admission decision and its release: estimate, offer to the queue, release."""
    from engine.admission.policy import Policy
    from engine.admission.queue import AdmissionQueue, Ticket, estimate_tokens

    queue = AdmissionQueue(Policy(), kv_budget_tokens=100_000)
    messages = payloads.template_messages(payloads.plain_request())
    counter = iter(range(10**9))

    def decide() -> None:
        tokens = estimate_tokens(messages, None, 64, 2048)
        ticket = Ticket(next(counter), "client-a", 0, tokens, 0.0, 30.0)
        queue.offer(ticket, cap=16)
        queue.release(ticket.id)

    benchmark(decide)
