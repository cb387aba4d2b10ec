"""Requests routed by model: three real servers (one serving `alpha`, one `beta`, one
both) behind a real vllm-router in its multi-model mode (`--enable-igw`), workers
registered with their model as docs/fleet.md says, traffic from the official openai
client. Each request must reach a replica that serves its model, every replica serving
a model must get some of it, and `/v1/models` through the router lists the union.

The replicas run the scripted engine (seconds to start): routing is the HTTP side's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from app.settings_sources import parse_args
from perf.harness.servers import free_port, scripted_argv
from perf.scenarios.fleet import _settings_json

ROOT = Path(__file__).resolve().parents[2]
ROUTER = str(Path(sys.executable).with_name("vllm-router"))
REPLICAS = {"a": ("alpha",), "b": ("beta",), "c": ("alpha", "beta")}


class Fleet:
    def __init__(self, router: str, replicas: dict[str, tuple[int, Path]]) -> None:
        self.router = router
        self.replicas = replicas

    def served(self) -> dict[str, Counter[str]]:
        """Chat requests each replica answered, by model (from its JSON access log)."""
        counts: dict[str, Counter[str]] = {}
        for name, (_, log) in self.replicas.items():
            counts[name] = Counter()
            for line in log.read_text().splitlines():
                if not line.startswith("{"):
                    continue
                event = json.loads(line)
                if event.get("endpoint") == "/v1/chat/completions" and event.get("status") == 200:
                    counts[name][event["model"]] += 1
        return counts


def _wait(url: str, process: subprocess.Popen[bytes], log: Path, path: str = "/health") -> None:
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        assert process.poll() is None, log.read_text()[-3000:]
        try:
            if httpx.get(url + path, timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.3)
    raise AssertionError(f"{url} not ready:\n{log.read_text()[-3000:]}")


def _replica(port: int, models: tuple[str, ...], log: Path) -> subprocess.Popen[bytes]:
    flags = ["--port", str(port), "--log-format", "json"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LILAC_SCRIPTED_MODELS": ",".join(models)}
    env["LILAC_SETTINGS_JSON"] = json.dumps(_settings_json(parse_args(flags)))
    with log.open("wb") as out:
        command = scripted_argv(port, "build")
        return subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=out)


def register(router: str, url: str, model: str) -> None:
    """One worker per (URL, model): vllm-router keys workers by URL, so a box serving
    two models is registered under a second name for the second (here `localhost`
    beside `127.0.0.1`; on Kubernetes, one Service per model)."""
    body = {"url": url, "model_id": model}
    response = httpx.post(f"{router}/workers", json=body, timeout=10)
    assert response.status_code == 200 and response.json()["success"], response.text


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    folder = tmp_path_factory.mktemp("model-routing")
    processes: list[subprocess.Popen[bytes]] = []
    try:
        replicas: dict[str, tuple[int, Path]] = {}
        for name, models in REPLICAS.items():
            port, log = free_port(), folder / f"replica-{name}.log"
            processes.append(_replica(port, models, log))
            replicas[name] = (port, log)
        port, log = free_port(), folder / "router.log"
        command = [
            ROUTER, "--host", "127.0.0.1", "--port", str(port), "--enable-igw",
            "--policy", "round_robin", "--health-check-endpoint", "/health",
            "--health-check-interval-secs", "1", "--prometheus-host", "127.0.0.1",
            "--prometheus-port", str(free_port()), "--log-level", "warning",
        ]  # fmt: skip
        with log.open("wb") as out:
            processes.append(subprocess.Popen(command, stdout=out, stderr=out))
        router = f"http://127.0.0.1:{port}"
        for (port_, log_), process in zip(replicas.values(), processes, strict=False):
            _wait(f"http://127.0.0.1:{port_}", process, log_)
        _wait(router, processes[-1], log, "/health")
        for name, models in REPLICAS.items():
            hosts = ("127.0.0.1", "localhost")
            for host, model in zip(hosts, models, strict=False):
                register(router, f"http://{host}:{replicas[name][0]}", model)
        yield Fleet(router, replicas)
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(timeout=30)


def test_each_models_requests_reach_replicas_that_serve_it(fleet: Fleet) -> None:
    client = openai.OpenAI(base_url=f"{fleet.router}/v1", api_key="none", max_retries=0)
    asked = ["alpha"] * 12 + ["beta"] * 12
    for model in asked[0::2] + asked[1::2]:  # alternating, then the rest
        reply = client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "hi"}], max_tokens=2
        )
        assert reply.model == model
    served = fleet.served()
    deadline = time.monotonic() + 10  # the access line is written as the request ends
    while sum(sum(c.values()) for c in served.values()) < len(asked):
        assert time.monotonic() < deadline, served
        time.sleep(0.2)
        served = fleet.served()
    print(f"\nrequests per replica by model: { {k: dict(v) for k, v in served.items()} }")
    assert set(served["a"]) == {"alpha"} and set(served["b"]) == {"beta"}
    assert served["c"]["alpha"] > 0 and served["c"]["beta"] > 0
    for model in ("alpha", "beta"):
        assert sum(counts[model] for counts in served.values()) == 12

    # A model no replica serves: the replica's own 404 in OpenAI's shape.
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(
            model="gamma", messages=[{"role": "user", "content": "hi"}], max_tokens=2
        )

    # The router's own /v1/models: the union of the registered models (ids only).
    listed = httpx.get(f"{fleet.router}/v1/models", timeout=10).json()
    assert sorted(listed["models"]) == ["alpha", "beta"]
