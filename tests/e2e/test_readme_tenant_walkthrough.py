"""The README's "A tenant's life", run as written on a fresh machine: an empty HOME, no
LILAC_* variables, `lilac-serve` on the PATH. Every `$ ` command of its shell blocks,
its curl call and its Python snippet are read from the README itself, so the test
follows the text. The only changes: the port (8000 may be taken; it is appended to
`serve` and replaced in the URLs), the engine's size on this machine, the printed key
and its id (the example's stand-ins), and the model cache, which is linked into the
new HOME (nothing may download a model here)."""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from engine.checkpoint import DEFAULT_MODEL_NAME
from tests.e2e.server import free_port

README = Path(__file__).resolve().parents[2] / "README.md"
BIN = str(Path(sys.executable).parent)
STARTUP_TIMEOUT_S = 600
EXAMPLE_ID = re.compile(r"key_[0-9a-f]{12}")
# The engine on this machine: small KV cache and context (not what the README is about).
ENGINE_FLAGS = ("--max-model-len", "2048", "--cpu-kvcache-space-gib", "1")


def walkthrough() -> list[tuple[str, str]]:
    """The section's code blocks in order, as (language, text)."""
    text = README.read_text()
    section = text.split("### A tenant's life", 1)[1].split("\n### ", 1)[0]
    return re.findall(r"```(\w*)\n(.*?)```", section, flags=re.DOTALL)


def shell_commands(block: str) -> list[str]:
    """The commands of a block: its `$ ` lines (without their comments), or the block
    itself when it has none (one command over continued lines)."""
    lines = [line[2:].split("  #")[0].strip() for line in block.splitlines()]
    prompted = [
        line for raw, line in zip(block.splitlines(), lines, strict=True) if raw[:2] == "$ "
    ]
    return prompted or [block.strip()]


class Machine:
    """A new user's shell: an empty HOME, no LILAC_* settings, lilac-serve on PATH."""

    def __init__(self, home: Path, port: int) -> None:
        self.home = home
        self.port = port
        env = {k: v for k, v in os.environ.items() if not k.startswith("LILAC_")}
        env.pop("XDG_CACHE_HOME", None)
        env.pop("XDG_DATA_HOME", None)
        self.env = {**env, "HOME": str(home), "PATH": f"{BIN}:{env.get('PATH', '')}"}
        self.env |= {"HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1"}
        self.key_id = ""
        self.secret = ""
        self.server: subprocess.Popen[bytes] | None = None

    def local(self, command: str) -> str:
        """The command for this machine: the real key id and port."""
        if self.key_id:
            command = EXAMPLE_ID.sub(self.key_id, command)
        return command.replace("127.0.0.1:8000", f"127.0.0.1:{self.port}")

    def run(self, command: str) -> subprocess.CompletedProcess[str]:
        env = dict(self.env)
        if not command.startswith("lilac-serve"):
            env["LILAC_KEY"] = self.secret  # the README's `$LILAC_KEY`, for curl
        result = subprocess.run(
            ["bash", "-c", self.local(command)],
            env=env, cwd=self.home, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert result.returncode == 0, f"{command!r} failed:\n{result.stdout}\n{result.stderr}"
        return result

    def serve(self, command: str) -> None:
        argv = [*shlex.split(command), "--port", str(self.port), *ENGINE_FLAGS]
        log = (self.home / "server.log").open("wb")
        self.server = subprocess.Popen(
            argv, env=self.env, cwd=self.home, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while True:
            if self.server.poll() is not None:
                raise AssertionError(f"serve exited:\n{self.log_tail()}")
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=2).status_code == 200:
                    return
            assert time.monotonic() < deadline, f"not ready in time:\n{self.log_tail()}"
            time.sleep(1)

    def log_tail(self) -> str:
        return (self.home / "server.log").read_text(errors="replace")[-4000:]

    def stop(self) -> None:
        if self.server is None or self.server.poll() is not None:
            return
        self.server.send_signal(signal.SIGTERM)
        try:
            self.server.wait(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(self.server.pid, signal.SIGKILL)
            self.server.wait(timeout=60)


@pytest.fixture
def machine(tmp_path: Path) -> Iterator[Machine]:
    home = tmp_path / "home"
    (home / ".cache").mkdir(parents=True)
    models = Path(os.environ.get("LILAC_CACHE_DIR") or Path.home() / ".cache" / "lilac-serve")
    (home / ".cache" / "lilac-serve").symlink_to(models.resolve())
    box = Machine(home, free_port())
    yield box
    box.stop()


def test_the_readme_tenant_walkthrough_runs_as_written(machine: Machine) -> None:
    blocks = walkthrough()
    languages = [language for language, _ in blocks]
    assert languages.count("sh") >= 3 and "python" in languages
    ran: list[str] = []
    for language, block in blocks:
        if language == "python":
            source = machine.local(block)
            namespace: dict[str, Any] = {"LILAC_KEY": machine.secret}
            exec(compile(source, "README.md", "exec"), namespace)
            reply = namespace["reply"]
            assert reply.model == DEFAULT_MODEL_NAME and reply.usage.total_tokens > 0
            ran.append("python")
            continue
        if language != "sh":
            continue  # a response shown, not a command
        for command in shell_commands(block):
            ran.append(command.split()[0] + " " + command.split()[1])
            if command.startswith("lilac-serve serve"):
                machine.serve(command)
                continue
            result = machine.run(command)
            check_output(machine, command, result)
    assert machine.key_id, "no `keys create` in the walkthrough"
    # The last command revoked the key: within a second every route refuses it.
    time.sleep(1.1)
    refused = httpx.get(
        f"http://127.0.0.1:{machine.port}/v1/models",
        headers={"Authorization": f"Bearer {machine.secret}"},
        timeout=10,
    )
    assert refused.status_code == 401
    print("ran:", ran)


def check_output(machine: Machine, command: str, result: subprocess.CompletedProcess[str]) -> None:
    """What each command of the walkthrough says it does."""
    if command.startswith("lilac-serve keys create"):
        machine.secret = result.stdout.strip()
        assert machine.secret.startswith("lilac-sk-") and len(machine.secret) == 52
        found = EXAMPLE_ID.search(result.stderr)
        assert found is not None, result.stderr
        machine.key_id = found.group(0)
        assert (machine.home / ".local" / "share" / "lilac-serve" / "lilac.db").is_file()
    elif command.startswith("curl"):
        assert '"chat.completion"' in result.stdout.replace(" ", ""), result.stdout
    elif command.startswith("lilac-serve usage"):
        row = next(line for line in result.stdout.splitlines() if line.startswith(machine.key_id))
        assert int(row.split()[1]) >= 2  # the curl call and the Python snippet
    elif command.startswith("lilac-serve keys list"):
        assert machine.key_id in result.stdout and machine.secret not in result.stdout
    elif command.startswith("lilac-serve keys update"):
        assert '"rpm": 120' in result.stdout
    elif command.startswith("lilac-serve keys revoke"):
        assert f"revoked {machine.key_id}" in result.stdout
