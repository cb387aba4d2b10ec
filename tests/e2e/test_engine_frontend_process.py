"""The engine's frontend in a process of its own on the real engine, as the default flags
run it (`--engine-frontend-process auto`, one model): the engine (AsyncLLM, with its
engine core under it) runs in a child process of the HTTP process, for the shared
`server` and the keys server alike. Chat answers streamed and not through the `openai`
SDK, a client that leaves frees its engine work within a second, and, with two keys,
key A's request abandoned before its first token is billed to A, whole prompt, while key
B's usage holds nothing of A's and B's identical prompt shows no cached tokens. (The
shared `server` checks at its end that SIGTERM stops every process, the child
included: tests/e2e/conftest.py.)"""

from __future__ import annotations

import socket
import sqlite3
import time
import uuid
from typing import Any

import openai

from engine.checkpoint import DEFAULT_MODEL_NAME
from perf.harness.servers import Server
from tests.e2e.conftest import KeysServer
from tests.e2e.test_cancellation import engine_holds, leave_and_time, send, wait_for

CHAT = [{"role": "user", "content": "Say hi."}]
CHAT_PATH = "/v1/chat/completions"


def runs_engine_apart(server: Server) -> bool:
    """The engine's process is a child of the HTTP process, and vLLM's engine core is
    that process's child, not the HTTP process's."""
    worker = server.http_process(granian=True)
    children = worker.children()
    apart = any("engine.remote.child" in " ".join(c.cmdline()) for c in children)
    cores = [p for p in worker.children(recursive=True) if "EngineCore" in p.name()]
    return apart and bool(cores) and all(core not in children for core in cores)


def sdk(server: Server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="unused", max_retries=0)


def test_the_default_flags_run_the_engine_in_a_child_of_the_http_process(
    server: Server, keys_server: KeysServer
) -> None:
    assert runs_engine_apart(server)
    assert runs_engine_apart(keys_server.server)


def test_chat_answers(server: Server) -> None:
    answer = sdk(server).chat.completions.create(
        model=DEFAULT_MODEL_NAME,
        messages=CHAT,
        max_tokens=16,  # type: ignore[arg-type]
    )
    assert answer.choices[0].message.content
    assert answer.usage is not None and 0 < answer.usage.completion_tokens <= 16


def test_chat_streams(server: Server) -> None:
    chunks = list(
        sdk(server).chat.completions.create(
            model=DEFAULT_MODEL_NAME,
            messages=CHAT,  # type: ignore[arg-type]
            max_tokens=16,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] in ("stop", "length")
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0


def test_a_client_that_leaves_frees_its_work(server: Server) -> None:
    wait_for(lambda: server.unfinished_requests() == 0, 60.0)
    body = {
        "model": DEFAULT_MODEL_NAME,
        "messages": CHAT,
        "max_tokens": 400,
        "ignore_eos": True,
        "stream": True,
    }
    sock = send(server, CHAT_PATH, body)
    sock.recv(1024)  # the response has started
    engine_holds(server, 1)
    assert leave_and_time(server, sock) < 1.0


# -- two keys


def memo() -> str:
    """About 1,300 tokens no other test sends (a fresh tag: nothing of it cached), long
    enough that its prefill leaves time to leave before the first token."""
    tag = uuid.uuid4().hex[:8]
    return "\n".join(
        f"Line {i} of confidential memo {tag}: the quarterly figure for region {i % 7} "
        f"is {i * 37 % 101} units."
        for i in range(45)
    )


def chat_body(text: str, **extra: Any) -> dict[str, Any]:
    messages = [{"role": "user", "content": text}]
    return {"model": DEFAULT_MODEL_NAME, "messages": messages, "max_tokens": 1, **extra}


def usage_rows(keys: KeysServer, name: str) -> list[dict[str, Any]]:
    """The usage rows of the key called `name`, from the keys database."""
    with sqlite3.connect(keys.data / "lilac.db") as db:
        db.row_factory = sqlite3.Row
        rows = db.execute(
            "SELECT u.request_id, u.prompt_tokens, u.cached_tokens, u.completion_tokens, "
            "u.outcome, u.ttft_ms FROM usage u JOIN api_keys k ON k.id = u.key_id "
            "WHERE k.name = ? ORDER BY u.id",
            (name,),
        ).fetchall()
    return [dict(row) for row in rows]


def rows_once_written(keys: KeysServer, name: str, count: int) -> list[dict[str, Any]]:
    """The key's rows once there are `count` (an abandoned request's row is queued,
    then written within about a second)."""
    rows: list[dict[str, Any]] = []

    def written() -> bool:
        rows[:] = usage_rows(keys, name)
        return len(rows) >= count

    wait_for(written, 30.0)
    return rows


def cached(keys: KeysServer, secret: str, text: str) -> tuple[int, int]:
    """(prompt tokens, cached tokens) of one answer to `text` under `secret`."""
    answer = keys.client(secret).chat.completions.create(**chat_body(text))
    assert answer.usage is not None and answer.usage.prompt_tokens_details is not None
    return answer.usage.prompt_tokens, answer.usage.prompt_tokens_details.cached_tokens or 0


def received_nothing(sock: socket.socket) -> bool:
    sock.setblocking(False)
    try:
        return not sock.recv(1024)  # b"": closed by the server; anything: it answered
    except BlockingIOError:
        return True  # nothing yet
    finally:
        sock.setblocking(True)


def engine_takes(server: Server, sock: socket.socket) -> None:
    """The engine holds the request sent on `sock`; if it never does, what the client got
    instead, and the server's log, say why."""
    try:
        engine_holds(server, 1)
    except AssertionError:
        sock.settimeout(2)
        try:
            got = sock.recv(4096)
        except OSError as error:
            got = repr(error).encode()
        raise AssertionError(
            f"the engine never took the request; the client got {got!r}\n{server.log_tail()}"
        ) from None


# Seconds to stay after the engine holds the request before leaving: the window between
# the engine's taking it and its first token is the prompt's prefill (a few hundred
# milliseconds here); tried in turn until one lands in it.
LEAVE_AFTER_S = (0.15, 0.05, 0.3, 0.0, 0.5)


def test_two_keys_through_the_engine_process(keys_server: KeysServer) -> None:
    server = keys_server.server
    assert runs_engine_apart(server)
    tag = uuid.uuid4().hex[:8]
    name_a, name_b = f"apart-a-{tag}", f"apart-b-{tag}"
    key_a = keys_server.new_key(name_a, rpm=None)
    key_b = keys_server.new_key(name_b, rpm=None)
    text = memo()
    body = chat_body(text, max_tokens=300, ignore_eos=True, stream=True)  # within 2048

    # Key A leaves a stream before its first token, once the engine has taken it.
    abandoned: dict[str, Any] | None = None
    tries = 0
    for delay in LEAVE_AFTER_S:
        wait_for(lambda: server.unfinished_requests() == 0, 60.0)
        sock = send(server, CHAT_PATH, body, key=key_a)
        engine_takes(server, sock)
        time.sleep(delay)
        nothing_came = received_nothing(sock)
        assert leave_and_time(server, sock) < 1.0
        tries += 1
        last = rows_once_written(keys_server, name_a, tries)[-1]
        assert last["outcome"] == "cancelled"
        if nothing_came and last["ttft_ms"] is None and last["prompt_tokens"] > 0:
            abandoned = last
            break
    assert abandoned is not None, "no try left between the engine's taking and a token"

    # The same prompt, answered: the abandoned request paid exactly its whole prompt.
    prompt_a, _ = cached(keys_server, key_a, text)
    assert prompt_a > 1000
    assert abandoned["prompt_tokens"] == prompt_a

    # Key B's identical prompt: nothing of A's in its cached tokens, while A's own
    # cache still serves A (so the prompt is in the cache, just not for B).
    prompt_b, cached_b = cached(keys_server, key_b, text)
    assert (prompt_b, cached_b) == (prompt_a, 0)
    assert cached(keys_server, key_a, text)[1] >= 512

    # The usage: every request of A billed to A; B's one row is B's own.
    rows_a = rows_once_written(keys_server, name_a, tries + 2)
    rows_b = rows_once_written(keys_server, name_b, 1)
    assert len(rows_a) == tries + 2
    assert [(r["prompt_tokens"], r["cached_tokens"]) for r in rows_b] == [(prompt_a, 0)]
    assert not {r["request_id"] for r in rows_a} & {r["request_id"] for r in rows_b}
