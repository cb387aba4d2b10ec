"""A tenant's life on a real server with `--auth keys` and the real model (the session's
`keys_server`, tests/e2e/conftest.py), through the official openai client: a key made by
the CLI, a bad key (AuthenticationError), a rate limit the SDK waits out by itself
(Retry-After), the usage report, revocation; and last, kill -9 under load: the database
holds a record, with the same token counts, for every response a client received whole."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from engine.checkpoint import DEFAULT_MODEL_NAME
from tests.e2e.conftest import MAX_FILE_LINES, KeysServer

HI = [{"role": "user", "content": "Say hi."}]


@pytest.fixture(scope="module")
def tenants(keys_server: KeysServer) -> KeysServer:
    """The session's keys server: every test here makes keys of its own."""
    return keys_server


def test_a_tenants_life(tenants: KeysServer) -> None:
    secret = tenants.cli("keys", "create", "--name", "erin", "--rpm", "10")
    key_id = next(line.split()[0] for line in tenants.cli("keys", "list").splitlines()[1:]
                  if " erin " in line)  # fmt: skip
    with pytest.raises(openai.AuthenticationError) as denied:
        tenants.client("lilac-sk-" + "x" * 43).models.list()
    assert denied.value.code == "invalid_api_key"

    client = tenants.client(secret, retries=2)
    raw = client.chat.completions.with_raw_response.create(
        model=DEFAULT_MODEL_NAME, messages=HI, max_tokens=2, temperature=0
    )
    assert raw.headers["x-ratelimit-limit-requests"] == "10"
    assert raw.headers["x-ratelimit-remaining-requests"] == "9"
    for _ in range(9):
        client.with_options(max_retries=0).chat.completions.create(
            model=DEFAULT_MODEL_NAME, messages=HI, max_tokens=1
        )
    with pytest.raises(openai.RateLimitError) as limited:
        client.with_options(max_retries=0).chat.completions.create(
            model=DEFAULT_MODEL_NAME, messages=HI, max_tokens=1
        )
    retry_after = int(limited.value.response.headers["retry-after"])
    assert 1 <= retry_after <= 6  # one request back every 6 s
    started = time.monotonic()
    waited = client.chat.completions.create(model=DEFAULT_MODEL_NAME, messages=HI, max_tokens=1)
    assert waited.choices  # the SDK slept on Retry-After and retried by itself
    assert time.monotonic() - started >= retry_after - 1

    time.sleep(1.5)  # refusals are counted in memory and written each second
    report = tenants.cli("usage", "--by", "key", "--format", "csv")
    header, *rows = (line.split(",") for line in report.splitlines())
    row = dict(zip(header, next(r for r in rows if r[0] == key_id), strict=True))
    requests, prompt, completion = (int(row[n]) for n in ("requests", "prompt_tokens",
                                                          "completion_tokens"))  # fmt: skip
    assert requests == 11 and completion >= 11 and prompt > 0  # 11 completed
    assert int(row["refused"]) == 2  # 2 refused (429): counts, not usage rows

    tenants.cli("keys", "revoke", key_id)
    time.sleep(1.1)
    with pytest.raises(openai.AuthenticationError):
        client.chat.completions.create(model=DEFAULT_MODEL_NAME, messages=HI, max_tokens=1)


def _batch_line(custom_id: str, **changes: Any) -> str:
    body = {"model": DEFAULT_MODEL_NAME, "messages": HI, "max_tokens": 4}
    line = {"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions", "body": body}
    return json.dumps({**line, **changes}) + "\n"


def test_files_of_two_tenants(tenants: KeysServer, tmp_path: Path) -> None:
    """The openai client's Files API against the real server: one key's upload, listed,
    retrieved and read back byte for byte; another key sees none of it and cannot delete
    it; a key limited to another model, a bad line, and uploads over the line and byte
    bounds are refused with their 400 or 413, and nothing of them is stored."""
    alice = tenants.client(tenants.new_key("files-a", rpm=None))
    bob = tenants.client(tenants.new_key("files-b", rpm=None))
    narrow = tenants.client(tenants.new_key("files-c", models=["other-model"]))
    path = tmp_path / "requests.jsonl"
    path.write_text("".join(_batch_line(f"req-{i}") for i in range(3)))
    with path.open("rb") as upload:
        made = alice.files.create(file=upload, purpose="batch")
    assert (made.filename, made.bytes, made.purpose) == (
        "requests.jsonl",
        path.stat().st_size,
        "batch",
    )
    assert alice.files.retrieve(made.id).id == made.id
    assert [f.id for f in alice.files.list()] == [made.id]
    assert alice.files.content(made.id).read() == path.read_bytes()

    for attempt in (bob.files.retrieve, bob.files.content, bob.files.delete):
        with pytest.raises(openai.NotFoundError):
            attempt(made.id)
    assert list(bob.files.list()) == []
    with pytest.raises(openai.BadRequestError) as foreign:
        narrow.files.create(file=path.open("rb"), purpose="batch")
    assert "line 1 (custom_id 'req-0')" in foreign.value.message
    assert f"the model '{DEFAULT_MODEL_NAME}' does not exist" in foreign.value.message

    bad = _batch_line("a") + _batch_line("b", url="/v1/embeddings")
    with pytest.raises(openai.BadRequestError) as unserved:
        bob.files.create(file=("bad.jsonl", bad.encode()), purpose="batch")
    assert "- line 2 (custom_id 'b'): url '/v1/embeddings' is not" in unserved.value.message
    many = "".join(_batch_line(f"r{i}") for i in range(MAX_FILE_LINES + 1))
    with pytest.raises(openai.BadRequestError) as too_many:
        bob.files.create(file=("many.jsonl", many.encode()), purpose="batch")
    assert too_many.value.code == "too_many_lines"
    huge = ("x" * 999 + "\n") * 2000  # 2 MB: refused once the first MB is in
    with pytest.raises(openai.APIStatusError) as too_big:
        bob.files.create(file=("huge.jsonl", huge.encode()), purpose="batch")
    assert too_big.value.status_code == 413
    assert list(bob.files.list()) == []

    alice.files.delete(made.id)
    with pytest.raises(openai.NotFoundError):
        alice.files.retrieve(made.id)


def _stored_by_owner(tenants: KeysServer) -> Counter[str]:
    with sqlite3.connect(tenants.data / "lilac.db") as db:
        owners = db.execute("SELECT owner, count(*) FROM stored_responses GROUP BY owner")
        return Counter(dict(owners.fetchall()))


def test_stored_responses_belong_to_their_key(tenants: KeysServer) -> None:
    """Through the real model, in the keys database: a response stored by default is
    retrieved, listed, continued and deleted by the key that made it; another key gets a
    404 for each, and cannot continue it."""
    before = _stored_by_owner(tenants)
    alice = tenants.client(tenants.new_key("alice"))
    bob = tenants.client(tenants.new_key("bob"))
    ask = {"model": DEFAULT_MODEL_NAME, "max_output_tokens": 4, "temperature": 0}
    first = alice.responses.create(input="Say hi.", **ask)
    got = alice.responses.retrieve(first.id)
    assert got.id == first.id and got.output_text == first.output_text
    assert got.usage is not None and first.usage is not None
    assert got.usage.output_tokens == first.usage.output_tokens
    items = alice.responses.input_items.list(first.id)
    assert [item.type for item in items.data] == ["message"] and not items.has_more
    second = alice.responses.create(input="Again.", previous_response_id=first.id, **ask)
    assert second.previous_response_id == first.id
    assert second.usage is not None and second.usage.input_tokens > first.usage.input_tokens

    foreign = [
        lambda: bob.responses.retrieve(first.id),
        lambda: bob.responses.input_items.list(first.id),
        lambda: bob.responses.delete(first.id),
        lambda: bob.responses.create(input="Mine now?", previous_response_id=first.id, **ask),
    ]
    for call in foreign:
        with pytest.raises(openai.NotFoundError) as refused:
            call()
        assert refused.value.code == "response_not_found"
    # alice's two; nothing of bob's (the rows this test stored: the database is shared)
    assert sorted((_stored_by_owner(tenants) - before).values()) == [2]

    alice.responses.delete(first.id)
    with pytest.raises(openai.NotFoundError):
        alice.responses.retrieve(first.id)
    assert alice.responses.retrieve(second.id).id == second.id
    with pytest.raises(openai.NotFoundError) as broken:  # its chain lost its first response
        alice.responses.create(input="More.", previous_response_id=second.id, **ask)
    assert first.id in broken.value.message


def _load(client: openai.OpenAI, seen: list[tuple[str, int, int]], stop: threading.Event) -> None:
    """Requests until `stop`; each one the client received whole goes into `seen`."""
    turn = 0
    while not stop.is_set():
        turn += 1
        try:
            if turn % 2:
                done = client.chat.completions.create(
                    model=DEFAULT_MODEL_NAME, messages=HI, max_tokens=8
                )
                usage: Any = done.usage
                seen.append((done.id, usage.prompt_tokens, usage.completion_tokens))
            else:  # raw HTTP: a stream is whole only with its `data: [DONE]`
                body = {"model": DEFAULT_MODEL_NAME, "messages": HI, "max_tokens": 8,
                        "stream": True, "stream_options": {"include_usage": True}}  # fmt: skip
                headers = {"Authorization": f"Bearer {client.api_key}"}
                text = httpx.post(
                    f"{client.base_url}chat/completions", json=body, headers=headers, timeout=60
                ).text
                events = [line[6:] for line in text.splitlines() if line.startswith("data: ")]
                if events and events[-1] == "[DONE]":
                    last = json.loads(events[-2])
                    usage = last["usage"]
                    seen.append((last["id"], usage["prompt_tokens"], usage["completion_tokens"]))
        except (openai.APIError, httpx.HTTPError):
            return  # the server is gone


def test_kill_9_under_load_loses_no_completed_request(tenants: KeysServer) -> None:
    secret = tenants.new_key("load", rpm=None)
    seen: list[tuple[str, int, int]] = []
    stop = threading.Event()
    workers = [
        threading.Thread(target=_load, args=(tenants.client(secret), seen, stop)) for _ in range(4)
    ]
    for worker in workers:
        worker.start()
    deadline = time.monotonic() + 60
    while len(seen) < 8 and time.monotonic() < deadline:
        time.sleep(0.1)
    tenants.kill()  # kill -9 of the whole process group
    stop.set()
    for worker in workers:
        worker.join(timeout=60)
    assert len(seen) >= 8
    with sqlite3.connect(tenants.data / "lilac.db") as db:
        rows = {
            request_id: (prompt, completion)
            for request_id, prompt, completion in db.execute(
                "SELECT request_id, prompt_tokens, completion_tokens FROM usage"
            )
        }
    missing = [s for s in seen if s[0] not in rows]
    mismatched = [s for s in seen if s[0] in rows and rows[s[0]] != s[1:]]
    print(f"kill -9: {len(seen)} completed at the client, {len(rows)} usage rows, "
          f"{len(missing)} missing, {len(mismatched)} mismatched")  # fmt: skip
    assert not missing and not mismatched
