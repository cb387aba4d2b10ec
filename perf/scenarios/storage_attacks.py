"""The attack matrix's rows on what a tenant can hold rather than compute (see
perf/scenarios/attacks.py, which runs them as it runs the others):

- `uploads`: 4 workers upload batch files of 0.5 MB in a loop; the key's stored bytes
  stop at `--max-stored-bytes-per-key` (413 `storage_quota_exceeded`) and its uploads
  count toward its requests per minute. The files are deleted when the attack stops.
- `half_bodies`: 16 workers each open a connection from another loopback address
  (127.0.0.2: another client than the victim), send a chat request's headers and half
  its body, then nothing, and hold it; one address may have
  `--max-bodies-in-flight-per-client` bodies in flight (429 `too_many_bodies_in_flight`
  past it), and a held one is closed by the server at `--body-read-timeout-s` (408).
  The held connections are closed when the attack stops.
- `followers`: 24 workers follow one of the attacker's background responses
  (`GET /v1/responses/{id}?stream=true`), each for a second, then again: the key may
  have `--max-followers-per-key` open at once (429 `too_many_followers` past it).

Outcomes as the other rows count them (`status code`); a held half body that the server
neither answered nor closed within its worker's wait counts as `0 held`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx

from engine.checkpoint import DEFAULT_MODEL_NAME
from perf.scenarios.deferred_attacks import CLEANUP_CONNECTIONS, Outcome, Send, Target, outcome_of

UPLOAD_BYTES = 500_000  # within the e2e keys server's --max-file-bytes (1 MB)
UPLOAD_LINES = 50
ATTACKER_ADDRESS = "127.0.0.2"  # any 127/8 address reaches a server bound to loopback
HELD_WAIT_S = 1.0  # how long a half body waits for an answer before it is counted held
FOLLOW_S = 1.0


@dataclass
class Held:
    """What a storage attack leaves to clean up: files, sockets, responses."""

    files: list[str] = field(default_factory=list)
    writers: list[asyncio.StreamWriter] = field(default_factory=list)
    response_id: str | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


def _upload_body() -> bytes:
    """`UPLOAD_BYTES` of `UPLOAD_LINES` batch lines (servers bound a file's lines too)."""
    padding = "x" * (UPLOAD_BYTES // UPLOAD_LINES - 200)
    lines = [
        json.dumps(
            {"custom_id": f"c{n}", "method": "POST", "url": "/v1/chat/completions",
             "body": {"model": DEFAULT_MODEL_NAME,
                      "messages": [{"role": "user", "content": padding}]}}
        ).encode() + b"\n"
        for n in range(UPLOAD_LINES)
    ]  # fmt: skip
    return b"".join(lines)


def uploads(held: Held) -> Send:
    content = _upload_body()

    async def send(client: httpx.AsyncClient, i: int) -> Outcome:
        files = {"file": (f"upload-{i}.jsonl", content, "application/jsonl")}
        response = await client.post("/v1/files", data={"purpose": "batch"}, files=files)
        if response.status_code == 200:
            held.files.append(response.json()["id"])
        return outcome_of(response)

    return send


def half_bodies(target: Target, held: Held) -> Send:
    address = urlsplit(target.url)
    body = json.dumps(
        {"model": DEFAULT_MODEL_NAME, "messages": [{"role": "user", "content": "hi " * 200}]}
    ).encode()
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: {address.hostname}\r\n"
        f"Authorization: Bearer {target.attacker}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()

    async def send(client: httpx.AsyncClient, i: int) -> Outcome:
        try:
            reader, writer = await asyncio.open_connection(
                address.hostname, address.port, local_addr=(ATTACKER_ADDRESS, 0)
            )
        except OSError as exc:
            return 0, type(exc).__name__
        writer.write(head + body[: len(body) // 2])
        await writer.drain()
        try:  # an answer comes whole and the server closes: read to the end
            answer = await asyncio.wait_for(reader.read(), HELD_WAIT_S)
        except TimeoutError:
            held.writers.append(writer)  # held open: the server times it out, or cleanup
            await asyncio.sleep(HELD_WAIT_S)
            return 0, "held"
        writer.close()
        return _status_and_code(answer)

    return send


def _status_and_code(answer: bytes) -> Outcome:
    """The status and error code of a raw HTTP/1.1 answer (0 `closed`: none came)."""
    head, _, payload = answer.partition(b"\r\n\r\n")
    parts = head.split(b"\r\n", 1)[0].split()
    if len(parts) < 2:
        return 0, "closed"
    code = None
    with contextlib.suppress(Exception):
        code = str(json.loads(payload)["error"]["code"])
    return int(parts[1]), code


def followers(held: Held) -> Send:
    async def send(client: httpx.AsyncClient, i: int) -> Outcome:
        response_id = await _followed(client, held)
        path = f"/v1/responses/{response_id}"
        async with client.stream("GET", path, params={"stream": "true"}) as response:
            if response.status_code != 200:
                await response.aread()
                return outcome_of(response)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(FOLLOW_S):
                    async for _ in response.aiter_lines():
                        pass
        return 200, None

    return send


async def _followed(client: httpx.AsyncClient, held: Held) -> str:
    """The one background response every follower follows: long, so it stays going."""
    async with held.lock:
        if held.response_id is None:
            body = {
                "model": DEFAULT_MODEL_NAME,
                "input": "Count from 1 to 1000, one number a line.",
                "background": True,
                "max_output_tokens": 512,
            }
            response = await client.post("/v1/responses", json=body)
            response.raise_for_status()
            held.response_id = str(response.json()["id"])
        return held.response_id


def cleanup(held: Held) -> Callable[[Target], Awaitable[None]]:
    """Delete the files, close the held connections, cancel the followed response."""

    async def run(target: Target) -> None:
        for writer in held.writers:
            writer.close()
        held.writers.clear()
        async with target.client(target.attacker, CLEANUP_CONNECTIONS) as client:
            paths = [f"/v1/files/{f}" for f in held.files]
            for start in range(0, len(paths), CLEANUP_CONNECTIONS):
                chunk = paths[start : start + CLEANUP_CONNECTIONS]
                await asyncio.gather(*(client.delete(path) for path in chunk))
            if held.response_id is not None:
                await client.post(f"/v1/responses/{held.response_id}/cancel")
        held.files.clear()
        held.response_id = None

    return run


def storage_attacks(target: Target) -> dict[str, tuple[str, int, Any, Any]]:
    """name -> (what, workers, send, cleanup)."""
    made_uploads, made_bodies, made_followers = Held(), Held(), Held()
    return {
        "uploads": (
            f"batch file uploads of {UPLOAD_BYTES / 1e6:g} MB, 4 at once",
            4,
            uploads(made_uploads),
            cleanup(made_uploads),
        ),
        "half_bodies": (
            f"half-sent chat bodies held open from {ATTACKER_ADDRESS}, 16 at once",
            16,
            half_bodies(target, made_bodies),
            cleanup(made_bodies),
        ),
        "followers": (
            "followers of one background response, 24 at once, a second each",
            24,
            followers(made_followers),
            cleanup(made_followers),
        ),
    }
