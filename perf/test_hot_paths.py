"""Micro-benchmarks of the per-request and per-token hot paths (no I/O).

Run with `make bench` (or `pytest perf`); `pytest` alone does not collect them.

Not benchmarked yet: the output parser per delta (engine/parsing.py) and one admission
decision (engine/admission.py), which landed on main after this suite was written. Add
`test_parse_delta` and `test_admission_decision` here.
"""

from __future__ import annotations

from typing import Any

from app.schemas.chat import ChatCompletionChunk, ChunkChoice, Delta, chat_request_decoder
from app.services.chat import messages_for_template
from app.services.sampling import sampling_options
from app.sse import frame
from engine.templates import render_chat
from perf import payloads

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
