"""Batches on a real server (the session's `keys_server`: `--auth keys`, the real model,
the scripted GPU probe) through the official openai client: a batch end to end; an owner
reclaim mid-batch that pauses it and lending that resumes it; kill -9 mid-batch and a
restart, after which every line is answered once and billed once; a background response
across an owner reclaim and a SIGTERM restart, stored once and billed once."""

from __future__ import annotations

import io
import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from engine.checkpoint import DEFAULT_MODEL_NAME
from perf.harness.servers import Server
from tests.e2e.conftest import ADMIN_KEY, KeysServer

CHAT = "/v1/chat/completions"


class BatchServer:
    """The session's keys server, and a key of this module's own."""

    def __init__(self, keys: KeysServer) -> None:
        self.keys = keys
        self.secret = keys.new_key("batches")

    @property
    def server(self) -> Server:
        return self.keys.server

    @property
    def data(self) -> Path:
        return self.keys.data

    def client(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{self.server.base_url}/v1", api_key=self.secret)

    def batch_usage(self) -> list[tuple[str, str, int, int]]:
        with sqlite3.connect(self.data / "lilac.db") as db:
            return list(
                db.execute(
                    "SELECT request_id, batch_id, prompt_tokens, completion_tokens FROM usage "
                    "WHERE batch_id IS NOT NULL"
                )
            )


@pytest.fixture(scope="module")
def batches(keys_server: KeysServer) -> BatchServer:
    return BatchServer(keys_server)


def upload(
    client: openai.OpenAI, count: int, max_tokens: int, tag: str, *, short_lines: int = 0
) -> str:
    """A batch file of `count` chat lines; the first `short_lines` ask for 2 tokens, so
    that they finish well before the others (which all start at once)."""
    lines = []
    for i in range(count):
        body = {
            "model": DEFAULT_MODEL_NAME,
            "messages": [{"role": "user", "content": f"{tag}: count to {i + 3}."}],
            "max_tokens": 2 if i < short_lines else max_tokens,
        }
        lines.append(json.dumps({"custom_id": f"{tag}-{i}", "method": "POST", "url": CHAT,
                                 "body": body}))  # fmt: skip
    data = io.BytesIO(("\n".join(lines) + "\n").encode())
    return client.files.create(file=("in.jsonl", data), purpose="batch").id


def wait_for(client: openai.OpenAI, batch_id: str, done: Any, timeout_s: float = 300) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        batch = client.batches.retrieve(batch_id)
        if done(batch):
            return batch
        time.sleep(0.2)
    raise AssertionError(f"batch {batch_id} not there in time: {batch}")


def final(batch: Any) -> bool:
    return batch.status in ("completed", "failed", "expired", "cancelled")


def output_of(client: openai.OpenAI, batch: Any) -> list[dict[str, Any]]:
    text = client.files.content(batch.output_file_id).text
    return [json.loads(line) for line in text.split("\n") if line.strip()]


def test_a_batch_end_to_end_with_the_openai_client(batches: BatchServer) -> None:
    client = batches.client()
    file_id = upload(client, 6, 4, "e2e")
    batch = client.batches.create(
        input_file_id=file_id, endpoint=CHAT, completion_window="24h", metadata={"job": "e2e"}
    )
    assert batch.status == "validating" and batch.metadata == {"job": "e2e"}
    assert batch.id in [b.id for b in client.batches.list(limit=10)]
    validated = wait_for(client, batch.id, lambda b: b.status != "validating")
    assert validated.in_progress_at is not None and validated.request_counts.total == 6
    done = wait_for(client, batch.id, final)
    assert done.status == "completed", done
    assert (done.request_counts.total, done.request_counts.completed) == (6, 6)
    assert done.error_file_id is None
    lines = output_of(client, done)
    assert sorted(line["custom_id"] for line in lines) == [f"e2e-{i}" for i in range(6)]
    for line in lines:
        body = line["response"]["body"]
        assert line["response"]["status_code"] == 200 and body["object"] == "chat.completion"
        assert body["usage"]["completion_tokens"] <= 4 and body["choices"][0]["message"]["content"]
    report = httpx.get(
        f"{batches.server.base_url}/admin/usage?by=batch",
        headers={"Authorization": f"Bearer {ADMIN_KEY}"},
        timeout=10,
    ).json()
    [row] = [row for row in report["data"] if row["batch"] == batch.id]
    assert row["requests"] == 6
    billed = sum(line["response"]["body"]["usage"]["completion_tokens"] for line in lines)
    assert row["completion_tokens"] == billed
    admin = httpx.get(
        f"{batches.server.base_url}/admin/batches",
        headers={"Authorization": f"Bearer {ADMIN_KEY}"},
        timeout=10,
    ).json()
    assert batch.id in [item["id"] for item in admin["data"]]
    assert "lilac_batch_lines_completed_total" in batches.server.metrics_text()


def test_a_responses_batch_answers_each_line_as_the_endpoint(batches: BatchServer) -> None:
    client = batches.client()
    lines = [
        {"custom_id": f"resp-{i}", "method": "POST", "url": "/v1/responses",
         "body": {"model": DEFAULT_MODEL_NAME, "input": f"Name the number {i}.",
                  "max_output_tokens": 4}}
        for i in range(3)
    ]  # fmt: skip
    lines.append({"custom_id": "bad-item", "method": "POST", "url": "/v1/responses",
                  "body": {"model": DEFAULT_MODEL_NAME, "max_output_tokens": 4,
                           "input": [{"type": "no_such_item"}]}})  # fmt: skip
    data = io.BytesIO(("\n".join(json.dumps(line) for line in lines) + "\n").encode())
    file_id = client.files.create(file=("responses.jsonl", data), purpose="batch").id
    batch = client.batches.create(
        input_file_id=file_id, endpoint="/v1/responses", completion_window="24h"
    )
    done = wait_for(client, batch.id, final)
    assert done.status == "completed", done
    assert (done.request_counts.completed, done.request_counts.failed) == (3, 1)
    for line in output_of(client, done):
        body = line["response"]["body"]
        assert body["object"] == "response" and body["status"] in ("completed", "incomplete")
        assert body["store"] is False and body["usage"]["output_tokens"] <= 4
        assert body["output"][0]["content"][0]["text"]
    errors = client.files.content(done.error_file_id).text
    [error] = [json.loads(x) for x in errors.split("\n") if x.strip()]
    assert error["custom_id"] == "bad-item" and error["response"]["status_code"] == 400
    assert error["response"]["body"]["error"]["param"] == "input[0].type"


def test_an_owner_reclaim_pauses_the_batch_and_it_completes(batches: BatchServer) -> None:
    client = batches.client()
    # One short line finishes first; the other nine (128 tokens, all started at once
    # with it) are still running when the owner comes back.
    file_id = upload(client, 10, 128, "reclaim", short_lines=1)
    batch = client.batches.create(input_file_id=file_id, endpoint=CHAT, completion_window="24h")
    wait_for(client, batch.id, lambda b: b.request_counts.completed >= 1)
    batches.server.reclaim_gpu(busy_s=6)
    # Paused: nothing runs while the owner has the GPU (the probe samples every 0.2 s).
    time.sleep(1.5)
    paused = client.batches.retrieve(batch.id)
    time.sleep(2.0)
    still = client.batches.retrieve(batch.id)
    assert paused.status == still.status == "in_progress"
    assert still.request_counts.completed == paused.request_counts.completed < 10
    assert 'lilac_batch_lines{state="running"} 0.0' in batches.server.metrics_text()
    done = wait_for(client, batch.id, final)
    assert done.status == "completed"
    assert (done.request_counts.completed, done.request_counts.failed) == (10, 0)
    assert len(output_of(client, done)) == 10


def test_kill_9_mid_batch_then_restart_answers_and_bills_each_line_once(
    batches: BatchServer,
) -> None:
    client = batches.client()
    count = 12
    file_id = upload(client, count, 128, "kill", short_lines=2)
    batch = client.batches.create(input_file_id=file_id, endpoint=CHAT, completion_window="24h")
    wait_for(client, batch.id, lambda b: b.request_counts.completed >= 2)
    batches.keys.kill()
    answered_before = sum(1 for row in batches.batch_usage() if row[1] == batch.id)
    assert answered_before < count, "the batch finished before the kill"
    client = batches.client()  # the keys server starts again, on the same data
    done = wait_for(client, batch.id, final)
    assert done.status == "completed", done
    lines = output_of(client, done)
    ids = [line["custom_id"] for line in lines]
    assert sorted(ids) == sorted(f"kill-{i}" for i in range(count)) and len(set(ids)) == count
    rows = [row for row in batches.batch_usage() if row[1] == batch.id]
    assert len(rows) == len({row[0] for row in rows}) == count  # billed once each
    billed = sum(row[3] for row in rows)
    answered = sum(line["response"]["body"]["usage"]["completion_tokens"] for line in lines)
    twice = len(ids) - len(set(ids))
    billed_twice = len(rows) - len({row[0] for row in rows})
    print(f"kill -9 mid-batch: {answered_before} answered before, {len(ids)} lines answered, "
          f"{twice} twice, {billed_twice} billed twice")  # fmt: skip
    assert billed == answered


def background_usage(batches: BatchServer, response_id: str) -> list[tuple[int, int, str]]:
    with sqlite3.connect(batches.data / "lilac.db") as db:
        return list(
            db.execute(
                "SELECT prompt_tokens, completion_tokens, outcome FROM usage WHERE request_id = ?",
                (response_id,),
            )
        )


# A schema no answer within `tokens` can complete: the run always lasts `tokens` decode
# steps, whatever the model would have said (a model told only to count may stop early).
LONG_ANSWER = {
    "type": "json_schema",
    "name": "numbers",
    "strict": True,
    "schema": {
        "type": "object",
        "properties": {
            "numbers": {"type": "array", "items": {"type": "integer"}, "minItems": 2000}
        },
        "required": ["numbers"],
        "additionalProperties": False,
    },
}


def running_response(client: openai.OpenAI, tokens: int) -> str:
    """A background response that has begun to run, and runs for `tokens` tokens."""
    response = client.responses.create(
        model=DEFAULT_MODEL_NAME,
        input="Count from 1 to 3000, as a JSON array of numbers.",
        background=True,
        temperature=0,
        max_output_tokens=tokens,
        text={"format": LONG_ANSWER},  # type: ignore[typeddict-item]
    )
    deadline = time.monotonic() + 120
    while client.responses.retrieve(response.id).status == "queued":
        assert time.monotonic() < deadline, "the background response never started"
        time.sleep(0.05)
    return response.id


def final_response(client: openai.OpenAI, response_id: str, timeout_s: float = 300) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        response = client.responses.retrieve(response_id)
        if response.status not in ("queued", "in_progress"):
            return response
        time.sleep(0.2)
    raise AssertionError(f"background response {response_id} not final in time")


def assert_stored_and_billed_once(batches: BatchServer, client: openai.OpenAI, rid: str) -> None:
    done = final_response(client, rid)
    assert done.status in ("completed", "incomplete"), done
    events = list(client.responses.retrieve(rid, stream=True))
    assert [e.sequence_number for e in events] == list(range(len(events)))  # one run
    assert sum(e.type == "response.created" for e in events) == 1
    assert events[-1].response.output_text == done.output_text  # type: ignore[union-attr]
    [(prompt, completion, outcome)] = background_usage(batches, rid)  # billed once
    assert done.usage is not None and outcome == "completed"
    assert (prompt, completion) == (done.usage.input_tokens, done.usage.output_tokens)


def test_a_background_response_across_a_reclaim_and_a_sigterm_restart(
    batches: BatchServer,
) -> None:
    client = batches.client()
    # Long enough to be running still when the probe's next sample sees the owner, on
    # a machine that decodes fast.
    rid = running_response(client, 600)
    batches.server.reclaim_gpu(busy_s=4)
    # Cut, not failed: back to queued while the owner has the GPU.
    deadline = time.monotonic() + 10
    while (status := client.responses.retrieve(rid).status) != "queued":
        assert status == "in_progress", f"the response ended ({status}) before the reclaim cut it"
        assert time.monotonic() < deadline, "the reclaim did not cut the response"
        time.sleep(0.05)
    assert_stored_and_billed_once(batches, client, rid)

    rid = running_response(client, 256)
    batches.keys.stop()  # SIGTERM: drains, cuts the running line, exits
    assert background_usage(batches, rid) == []
    client = batches.client()  # the keys server starts again, on the same data
    assert_stored_and_billed_once(batches, client, rid)
