"""`lilac-serve serve --engine-frontend-process true` on the real engine: the engine
(AsyncLLM, with its engine core under it) runs in a child process of the HTTP process;
chat answers streamed and not through the `openai` SDK, a client that leaves frees its
engine work within a second, and SIGTERM stops everything cleanly (exit 0)."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import openai
import psutil
import pytest

from engine.checkpoint import DEFAULT_MODEL_NAME
from perf.harness.servers import Server, launch_lilac
from tests.e2e.test_cancellation import engine_holds, leave_and_time, send

CHAT = [{"role": "user", "content": "Say hi."}]


@pytest.fixture(scope="module")
def process_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    workdir: Path = tmp_path_factory.mktemp("engine-process")
    args = ("--engine-frontend-process", "true", "--grammar-warmup", "false")
    server = launch_lilac(workdir, extra_args=args).wait_healthy()
    try:
        yield server
    finally:
        if server.process.poll() is None:
            server.kill_all()


def sdk(server: Server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="unused", max_retries=0)


def test_the_engine_runs_in_a_child_of_the_http_process(process_server: Server) -> None:
    worker = process_server.http_process(granian=True)
    children = worker.children()
    assert any("engine.remote.child" in " ".join(c.cmdline()) for c in children)
    cores = [p for p in worker.children(recursive=True) if "EngineCore" in p.name()]
    assert cores and all(core not in children for core in cores)


def test_chat_answers(process_server: Server) -> None:
    answer = sdk(process_server).chat.completions.create(
        model=DEFAULT_MODEL_NAME,
        messages=CHAT,
        max_tokens=16,  # type: ignore[arg-type]
    )
    assert answer.choices[0].message.content
    assert answer.usage is not None and 0 < answer.usage.completion_tokens <= 16


def test_chat_streams(process_server: Server) -> None:
    chunks = list(
        sdk(process_server).chat.completions.create(
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


def test_a_client_that_leaves_frees_its_work(process_server: Server) -> None:
    body = {
        "model": DEFAULT_MODEL_NAME,
        "messages": CHAT,
        "max_tokens": 400,
        "ignore_eos": True,
        "stream": True,
    }
    sock = send(process_server, "/v1/chat/completions", body)
    sock.recv(1024)  # the response has started
    engine_holds(process_server, 1)
    assert leave_and_time(process_server, sock) < 1.0


def test_sigterm_stops_every_process(process_server: Server) -> None:
    everything = process_server.processes()[1:]
    process_server.process.send_signal(signal.SIGTERM)
    assert process_server.process.wait(timeout=120) == 0, process_server.log_tail()
    deadline = time.monotonic() + 30
    while any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in everything):
        assert time.monotonic() < deadline, "a process outlived the server"
        time.sleep(0.2)
