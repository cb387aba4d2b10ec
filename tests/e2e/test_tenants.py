"""A tenant's life on a real server with `--auth keys` and the real model, through the
official openai client: a key made by the CLI, a bad key (AuthenticationError), a rate
limit the SDK waits out by itself (Retry-After), the usage report, revocation; and
last, kill -9 under load: the database holds a record, with the same token counts,
for every response a client received whole."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from engine.checkpoint import DEFAULT_MODEL_NAME
from perf.harness.servers import LILAC, Server, free_port, lilac_argv

STARTUP_TIMEOUT_S = 600  # a loaded CI box: the engine alone took minutes
HI = [{"role": "user", "content": "Say hi."}]


class TenantServer:
    def __init__(self, server: Server, data: Path) -> None:
        self.server = server
        self.url = server.base_url
        self.data = data

    def cli(self, *args: str) -> str:
        result = subprocess.run(
            [LILAC, *args, "--data-dir", str(self.data)],
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
        )
        return result.stdout.strip()

    def client(self, key: str, retries: int = 0) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{self.url}/v1", api_key=key, max_retries=retries)


@pytest.fixture(scope="module")
def tenants(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TenantServer]:
    data = tmp_path_factory.mktemp("tenants")
    port = free_port()
    subprocess.run(
        [LILAC, "keys", "create", "--name", "bootstrap", "--data-dir", str(data)],
        check=True,
        capture_output=True,
    )
    argv = lilac_argv(
        port, "--auth", "keys", "--data-dir", str(data),
        "--max-model-len", "2048", "--cpu-kvcache-space-gib", "1",
    )  # fmt: skip
    server = Server(argv, data / "server.log", port=port, env={"VLLM_CPU_KVCACHE_SPACE": "1"})
    server.wait_healthy(STARTUP_TIMEOUT_S)
    yield TenantServer(server, data)
    server.kill_all()


def test_a_tenants_life(tenants: TenantServer) -> None:
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
    row = next(line for line in report.splitlines() if line.startswith(key_id)).split(",")
    requests, prompt, _, completion = (int(v) for v in row[1:5])
    assert requests == 11 and completion >= 11 and prompt > 0  # 11 completed
    assert int(row[-1]) == 2  # 2 refused (429): counts, not usage rows

    tenants.cli("keys", "revoke", key_id)
    time.sleep(1.1)
    with pytest.raises(openai.AuthenticationError):
        client.chat.completions.create(model=DEFAULT_MODEL_NAME, messages=HI, max_tokens=1)


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


def test_kill_9_under_load_loses_no_completed_request(tenants: TenantServer) -> None:
    secret = tenants.cli("keys", "create", "--name", "load", "--rpm", "none")
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
    tenants.server.kill_all()  # kill -9 of the whole process group
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
