"""The worst shapes of request bytes, each a function of a size `n`.

Complexity tests (tests/unit/**/test_complexity*.py) run each check on these at n, 2n,
4n and 8n; perf/loop_stall.py sends the request bodies at the end (`stall_bodies`) to a
real server while it measures how long the event loop is held. A shape here is what
made, or could make, a check superlinear: a backtracking scan, a search that restarts,
a recursion per level, a conversion quadratic in digits.
"""

from __future__ import annotations

import base64
import json
import struct
import zlib
from typing import Any

MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"

# ------------------------------------------------------------------ raw JSON bytes


def unclosed_escaped_string(n: int, depth: int = 65) -> bytes:
    """`[` x depth, then a string of `\\"` that never closes: quadratic for a regular
    expression that tries every quote as the start of a string."""
    return b"[" * depth + b'"' + b'\\"' * n


def backslash_run(n: int) -> bytes:
    """One string holding 2n backslashes (valid), then a bracket after it."""
    return b'["' + b"\\" * (2 * n) + b'",[]]'


def backslash_runs_before_quotes(n: int) -> bytes:
    """Runs of 1, 2, 3... backslashes, each before a quote: parity decides each one."""
    parts = []
    total = 0
    k = 1
    while total < n:
        parts.append(b'"' + b"\\" * (2 * k) + b'"')
        total += 2 * k + 2
        k += 1
    return b"[" + b",".join(parts) + b"]"


def deep_brackets(n: int) -> bytes:
    return b"[" * n + b"]" * n


def brackets_in_strings(n: int) -> bytes:
    """Brackets that are all inside strings: depth 1."""
    return b'["' + b"[{" * n + b'", "' + b"]}" * n + b'"]'


def many_short_strings(n: int) -> bytes:
    """A quote every few bytes, some with escaped quotes inside."""
    return b"[" + b",".join(b'"a\\"[' for _ in range(n)).replace(b"[,", b'[",') + b'"]'


def huge_number(n: int) -> bytes:
    return b'{"x": 1' + b"0" * n + b"}"


def unicode_escapes(n: int) -> bytes:
    return b'"' + b"\\u00e9" * n + b'"'


def lone_surrogates(n: int) -> bytes:
    return b'"' + b"\\ud800" * n + b'"'


# ------------------------------------------------------------------ request bodies


def chat_body(messages: list[dict[str, Any]] | None = None, **fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": MODEL,
        "messages": messages or [{"role": "user", "content": "hi"}],
        "max_tokens": 4,
    }
    body.update(fields)
    return body


def encoded(body: dict[str, Any]) -> bytes:
    return json.dumps(body).encode()


def with_raw_field(body: dict[str, Any], raw: bytes) -> bytes:
    """`body` with one extra field (ignored by the server) holding `raw` as is."""
    return encoded(body)[:-1] + b', "extra": ' + raw + b"}"


def many_messages(n: int) -> list[dict[str, Any]]:
    """A history of n turns, alternating user and assistant, ending on the user."""
    roles = ("user", "assistant")
    messages = [{"role": roles[i % 2], "content": f"turn {i}"} for i in range(n)]
    if messages[-1]["role"] != "user":
        messages.append({"role": "user", "content": "go on"})
    return messages


def unclosed_arguments(n: int) -> str:
    """Tool-call `arguments` that open brackets past the arguments bound, then an
    unclosed string of escapes."""
    return "[" * 33 + '"' + '\\"' * n


def deep_arguments(n: int) -> str:
    return "[" * n + "]" * n


def tool_call_history(arguments: str) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "f", "arguments": arguments}}
            ],
        },
        {"role": "tool", "tool_call_id": "c", "content": "ok"},
        {"role": "user", "content": "go on"},
    ]


def logit_bias(n: int) -> dict[str, float]:
    return {str(i): 1.0 for i in range(n)}


def long_logit_bias_key(n: int) -> dict[str, float]:
    """One key of n digits: `int()` of a decimal string is quadratic in its digits."""
    return {"1" * n: 1.0}


def stop_strings(n: int) -> list[str]:
    return ["x" * n for _ in range(4)]


def token_prompt(n: int) -> list[int]:
    return [i % 1000 for i in range(n)]


# ------------------------------------------------------------------ schemas and grammars


def wide_schema(values: int) -> dict[str, Any]:
    """An object schema of about `values` values (two per property)."""
    count = max(1, (values - 3) // 2)
    return {"type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(count)}}


def deep_schema(levels: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range((levels - 1) // 2):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


def long_enum_schema(chars: int) -> dict[str, Any]:
    items = max(1, chars // 100)
    return {"type": "string", "enum": ["x" * 95 + f"{i:05d}" for i in range(items)]}


def pattern_schema(n: int) -> dict[str, Any]:
    """Properties with `pattern`s: the schema check compiles each as a regex."""
    return {
        "type": "object",
        "properties": {f"p{i}": {"type": "string", "pattern": "^(a|b)*c$"} for i in range(n)},
    }


def nested_any_of(n: int) -> dict[str, Any]:
    """anyOf of anyOf: the worst-case estimate visits every branch once."""
    return {"anyOf": [{"anyOf": [{"type": "string"}, {"type": "integer"}]} for _ in range(n)]}


def wide_regex(n: int) -> str:
    return "|".join(f"a{i}" for i in range(n))


def starred_regex(n: int) -> str:
    return "(a|b)*c" * n


def wide_grammar(n: int) -> str:
    rules = "\n".join(f'r{i} ::= "x{i}"' for i in range(n))
    return "root ::= " + " | ".join(f"r{i}" for i in range(n)) + "\n" + rules


# ------------------------------------------------------------------ images


def png_header(width: int, height: int) -> bytes:
    """A PNG whose header claims width x height pixels, with one tiny data chunk."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = zlib.crc32(kind + data) & 0xFFFFFFFF
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(b"\0"))
        + chunk(b"IEND", b"")
    )


def wrapped_data_uri(n: int) -> str:
    """A data URI of about n base64 characters with a line break every 4: the decoder
    strips whitespace first."""
    payload = base64.b64encode(png_header(64, 64) + b"\0" * (n * 3 // 4)).decode()
    return "data:image/png;base64," + "\n".join(
        payload[i : i + 4] for i in range(0, len(payload), 4)
    )


def bomb_data_uri(n: int) -> str:
    """A PNG header claiming 60,000 x 60,000 pixels, padded to about n bytes."""
    return (
        "data:image/png;base64," + base64.b64encode(png_header(60_000, 60_000) + b"\0" * n).decode()
    )


def image_parts(n: int) -> list[dict[str, Any]]:
    """One user message of n image parts (past the per-request image limit)."""
    part = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    return [{"role": "user", "content": [{"type": "text", "text": "look"}] + [part] * n}]


# ------------------------------------------------------------------ for the loop-stall run

# About this many bytes per body: past the inline limit (64 KiB), so the scan and the
# decode run off the event loop, and well within the default body limit.
STALL_BYTES = 1_000_000


def stall_bodies() -> dict[str, tuple[str, bytes]]:
    """Per shape: (path, raw body), each about STALL_BYTES, all refused or cheap."""
    chat = chat_body()
    n = STALL_BYTES
    small = 32_000  # the 64 KiB body: scanned on the event loop
    return {
        "64 KiB unclosed string of escapes": (
            "/v1/chat/completions",
            unclosed_escaped_string(small),
        ),
        "1 MB unclosed string of escapes": (
            "/v1/chat/completions",
            unclosed_escaped_string(n // 2),
        ),
        "1 MB backslash run": ("/v1/chat/completions", with_raw_field(chat, backslash_run(n // 2))),
        "1 MB deep brackets": ("/v1/chat/completions", with_raw_field(chat, deep_brackets(n // 2))),
        "1 MB brackets in strings": (
            "/v1/chat/completions",
            with_raw_field(chat, brackets_in_strings(n // 4)),
        ),
        "1 MB number": ("/v1/chat/completions", with_raw_field(chat, huge_number(n))),
        "1 MB of \\u escapes": (
            "/v1/chat/completions",
            with_raw_field(chat, unicode_escapes(n // 6)),
        ),
        "1 MB of lone surrogates": (
            "/v1/chat/completions",
            with_raw_field(chat, lone_surrogates(n // 6)),
        ),
        "10,000 messages (chat)": (
            "/v1/chat/completions",
            encoded(chat_body(many_messages(10_000))),
        ),
        "10,000 messages (tokenize)": (
            "/tokenize",
            encoded({"model": MODEL, "messages": many_messages(10_000)}),
        ),
        "1 MB unclosed tool-call arguments": (
            "/v1/chat/completions",
            encoded(chat_body(tool_call_history(unclosed_arguments(n // 4)))),
        ),
        "logit_bias of 50,000 keys": (
            "/v1/chat/completions",
            encoded(chat_body(logit_bias=logit_bias(50_000))),
        ),
        "4 stop strings of 250 kB": (
            "/v1/chat/completions",
            encoded(chat_body(stop=stop_strings(n // 4))),
        ),
        "completions: schema at the node bound": (
            "/v1/completions",
            encoded(
                {
                    "model": MODEL,
                    "prompt": "hi",
                    "max_tokens": 4,
                    "response_format": {
                        "type": "json_schema",
                        "json_schema": {"name": "r", "schema": wide_schema(4_990)},
                    },
                }
            ),
        ),
        "completions: 200,000 token ids": (
            "/v1/completions",
            encoded({"model": MODEL, "prompt": token_prompt(200_000), "max_tokens": 4}),
        ),
        "data URI with a line break every 4 characters": (
            "/v1/chat/completions",
            encoded(
                chat_body(
                    [
                        {
                            "role": "user",
                            "content": [
                                {
                                    "type": "image_url",
                                    "image_url": {"url": wrapped_data_uri(n * 3 // 5)},
                                }
                            ],
                        }
                    ]
                )
            ),
        ),
    }
