"""The attack matrix's rows on deferred work and the routes beside it (see
perf/scenarios/attacks.py, which runs them as it runs the others):

- `background`: 16 workers create background responses (`max_output_tokens` 64); each
  cancels every other one 0.3 s after creating it and polls the others to their end;
  whatever ran is billed.
- `batches`: 4 workers create batches in a loop from one file of long lines, as large
  as the server takes up to 8 MB (each line's prompt longer than the context: answered
  400 without running); a key has at most `--max-live-batches`, so the rest are 429.
- `count_tokens`: 8 workers send `/v1/messages/count_tokens` bodies of 9 MB, refused by
  the byte bound before the tokenizer (a byte over what the context could hold).

Each attack leaves nothing behind: when it stops, the attacker's batches and background
responses still going are cancelled (`Attack.cleanup`), and the row is billed after.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx

from engine.checkpoint import DEFAULT_MODEL_NAME
from perf.harness.servers import Server

Outcome = tuple[int, str | None]


class Target(Protocol):
    """What these attacks need of the matrix's target (perf.scenarios.attacks.Target)."""

    url: str
    attacker: str
    server: Server | None

    def client(self, secret: str, connections: int = 16) -> httpx.AsyncClient: ...


Send = Callable[[httpx.AsyncClient, int], Awaitable[Outcome]]
COUNT_TOKENS_BYTES = 9_000_000
CLEANUP_CONNECTIONS = 16
BATCH_LINE_WORDS = 4_000  # ~4,000 tokens: over the 2,048-token context whatever they are


def outcome_of(response: httpx.Response) -> Outcome:
    code = None
    if response.status_code >= 400:
        with contextlib.suppress(Exception):
            code = response.json()["error"]["code"]
    return response.status_code, code


@dataclass
class Made:
    """What an attack created and may have to cancel when it stops."""

    responses: list[str] = field(default_factory=list)
    batches: list[str] = field(default_factory=list)
    file_id: str | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


def background(made: Made) -> Send:
    async def send(client: httpx.AsyncClient, i: int) -> Outcome:
        body = {
            "model": DEFAULT_MODEL_NAME,
            "input": f"Background {i}: tell a long story.",
            "background": True,
            "max_output_tokens": 64,
        }
        response = await client.post("/v1/responses", json=body)
        if response.status_code != 200:
            return outcome_of(response)
        response_id = response.json()["id"]
        made.responses.append(response_id)
        if i % 2:
            await asyncio.sleep(0.3)
            await client.post(f"/v1/responses/{response_id}/cancel")
            return 200, None
        while True:  # the others are polled to their end, as a client does
            await asyncio.sleep(0.25)
            polled = await client.get(f"/v1/responses/{response_id}")
            if polled.status_code != 200:
                return outcome_of(polled)
            if polled.json()["status"] not in ("queued", "in_progress"):
                return 200, None

    return send


async def _batch_file(client: httpx.AsyncClient, made: Made, max_bytes: int) -> str:
    """One file of lines as large as the server takes (at most 100 lines)."""
    async with made.lock:
        if made.file_id is None:
            words = " ".join(f"w{n}" for n in range(BATCH_LINE_WORDS))
            lines = []
            size = 0
            for n in range(100):
                body = {
                    "model": DEFAULT_MODEL_NAME,
                    "messages": [{"role": "user", "content": f"{n} {words}"}],
                    "max_tokens": 8,
                }
                line = json.dumps(
                    {"custom_id": f"l{n}", "method": "POST", "url": "/v1/chat/completions",
                     "body": body}
                ).encode() + b"\n"  # fmt: skip
                if size + len(line) > max_bytes:
                    break
                lines.append(line)
                size += len(line)
            files = {"file": ("attack.jsonl", b"".join(lines), "application/jsonl")}
            response = await client.post("/v1/files", data={"purpose": "batch"}, files=files)
            response.raise_for_status()
            made.file_id = response.json()["id"]
        return made.file_id


def batches(made: Made, max_file_bytes: int) -> Send:
    async def send(client: httpx.AsyncClient, i: int) -> Outcome:
        file_id = await _batch_file(client, made, max_file_bytes)
        body = {
            "input_file_id": file_id,
            "endpoint": "/v1/chat/completions",
            "completion_window": "24h",
        }
        response = await client.post("/v1/batches", json=body)
        if response.status_code == 200:
            made.batches.append(response.json()["id"])
        return outcome_of(response)

    return send


def count_tokens() -> Send:
    text = "word " * (COUNT_TOKENS_BYTES // 5)
    body = json.dumps(
        {"model": DEFAULT_MODEL_NAME, "messages": [{"role": "user", "content": text}]}
    ).encode()

    async def send(client: httpx.AsyncClient, i: int) -> Outcome:
        headers = {"Content-Type": "application/json"}
        response = await client.post("/v1/messages/count_tokens", content=body, headers=headers)
        return outcome_of(response)

    return send


def cleanup(made: Made) -> Callable[[Target], Awaitable[None]]:
    """Cancel what the attack left going (its key's own cancel calls)."""

    async def run(target: Target) -> None:
        paths = [f"/v1/batches/{b}/cancel" for b in made.batches]
        paths += [f"/v1/responses/{r}/cancel" for r in made.responses]
        async with target.client(target.attacker, CLEANUP_CONNECTIONS) as client:
            for start in range(0, len(paths), CLEANUP_CONNECTIONS):
                chunk = paths[start : start + CLEANUP_CONNECTIONS]
                await asyncio.gather(*(client.post(path) for path in chunk))
            await _until_batches_end(client, made.batches)
        made.batches.clear()
        made.responses.clear()

    return run


async def _until_batches_end(client: httpx.AsyncClient, batch_ids: list[str]) -> None:
    """Wait (at most a minute) until the cancelled batches have ended."""
    live = ("validating", "in_progress", "cancelling", "finalizing")
    for _ in range(240):
        answers = await asyncio.gather(*(client.get(f"/v1/batches/{b}") for b in batch_ids))
        if not any(a.status_code == 200 and a.json()["status"] in live for a in answers):
            return
        await asyncio.sleep(0.25)


def max_file_bytes(target: Target) -> int:
    """The server's `--max-file-bytes` (from its command line; the default otherwise)."""
    argv = target.server.argv if target.server is not None else []
    for flag, value in itertools.pairwise(argv):
        if flag == "--max-file-bytes":
            return int(value)
    return 100_000_000


def deferred_attacks(target: Target) -> dict[str, tuple[str, int, Any, Any]]:
    """name -> (what, workers, send, cleanup)."""
    made_background, made_batches = Made(), Made()
    limit = min(max_file_bytes(target), 8_000_000)
    return {
        "background": (
            "background responses, max_output_tokens 64, every other cancelled, 16 at once",
            16,
            background(made_background),
            cleanup(made_background),
        ),
        "batches": (
            f"batch creations from one file of {limit // 1_000_000 or 1} MB of over-long "
            "lines, 4 at once",
            4,
            batches(made_batches, limit),
            cleanup(made_batches),
        ),
        "count_tokens": (
            f"count_tokens bodies of {COUNT_TOKENS_BYTES // 1_000_000} MB, 8 at once",
            8,
            count_tokens(),
            None,
        ),
    }
