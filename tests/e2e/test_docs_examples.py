"""Every command and Python example the documentation tells a reader to run, run as a
reader would run it: README.md and each page of docs/, block by block in page order,
in a fresh empty HOME (so a fresh data directory) with the virtual environment first on
PATH, against a real server where a block talks to one.

A page's blocks share one shell environment, as one terminal would: what a block
exports is there for the next (the tenant walkthrough keeps its key in `LILAC_KEY`).
`127.0.0.1:8000` in a block is the test server's address. Blocks talk to the session's
e2e server (`--auth none` on loopback, the admin key in `LILAC_ADMIN_KEY`), except on
the tenants page, whose server runs `--auth keys` over that page's own keys database,
started when a block first needs it. A block fails on a non-zero exit; curl runs with
`--fail-with-body`, so an HTTP error fails it too. Blocks marked
`<!-- not run: REASON -->` are left out (tests/docs/test_blocks.py holds every other
block to the rules).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from engine.checkpoint import DEFAULT_MODEL_NAME
from tests.docs.blocks import Block, all_blocks
from tests.e2e.conftest import ADMIN_KEY
from tests.e2e.server import RunningServer, free_port, wait_healthy

BLOCKS = [block for block in all_blocks() if block.runs]
DOCUMENTED_ADDRESSES = ("127.0.0.1:8000", "localhost:8000")
KEYS_PAGES = frozenset({"docs/tenants.md"})
BLOCK_TIMEOUT_S = 300
VENV_BIN = str(Path(sys.executable).parent)
# The model prepared once for the whole suite: an empty HOME would otherwise mean
# preparing it again (LILAC_CACHE_DIR is the documented way to point at it).
MODEL_CACHE = os.environ.get("LILAC_CACHE_DIR") or str(Path.home() / ".cache" / "lilac-serve")
# curl fails on an HTTP error, unless the block already chose a --fail of its own.
SHELL_PRELUDE = """set -euo pipefail
curl() {
  local arg
  for arg in "$@"; do
    case "$arg" in --fail*|-[a-zA-Z]*f*) command curl "$@"; return;; esac
  done
  command curl --fail-with-body "$@"
}
"""


@dataclass
class Page:
    """One page's terminal: its HOME, its environment, its keys server once started."""

    home: Path
    env: dict[str, str]
    server: RunningServer | None = None
    logs: list[Path] = field(default_factory=list)


def _fresh_env(home: Path) -> dict[str, str]:
    env = {
        "HOME": str(home),
        "PATH": f"{VENV_BIN}:/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "LILAC_CACHE_DIR": MODEL_CACHE,
        "HF_HUB_OFFLINE": "1",
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "LILAC_ADMIN_KEY": ADMIN_KEY,  # the e2e server's, as a reader would export it
    }
    if "PYTHONPATH" in os.environ:  # the code under test, when it is not installed
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    return env


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Page]]:
    opened: dict[str, Page] = {}
    yield opened
    for page in opened.values():
        if page.server is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(page.server.process.pid, signal.SIGKILL)
            page.server.process.wait(timeout=60)


def _page(pages: dict[str, Page], path: str, tmp_path_factory: pytest.TempPathFactory) -> Page:
    if path not in pages:
        home = tmp_path_factory.mktemp("home")
        pages[path] = Page(home=home, env=_fresh_env(home))
    return pages[path]


def _keys_server(page: Page) -> RunningServer:
    """`lilac-serve serve --auth keys` over the page's keys database, on loopback."""
    if page.server is None:
        port = free_port()
        log_path = page.home.parent / f"{page.home.name}-server.log"
        command = [
            str(Path(VENV_BIN) / "lilac-serve"), "serve", "--auth", "keys", "--port", str(port),
            "--max-model-len", "2048", "--cpu-kvcache-space-gib", "1",
        ]  # fmt: skip
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=page.env,
                cwd=page.home,
                start_new_session=True,  # so that the teardown's kill reaches the engine
            )
        page.server = RunningServer(process, f"http://127.0.0.1:{port}", log_path, log_path)
        wait_healthy(page.server, timeout_s=600)
    return page.server


def _address(block: Block, page: Page, request: pytest.FixtureRequest) -> str | None:
    if not any(address in block.text for address in DOCUMENTED_ADDRESSES):
        return None
    server = _keys_server(page) if block.path in KEYS_PAGES else request.getfixturevalue("server")
    return server.base_url.removeprefix("http://")


def _run(block: Block, page: Page, text: str) -> subprocess.CompletedProcess[str]:
    if block.lang == "python":
        script = page.home / f"block-{block.line}.py"
        script.write_text(text)
        command = [str(Path(VENV_BIN) / "python"), str(script)]
    else:
        state = page.home.parent / f"{page.home.name}-env"
        dump = f'\nenv -0 > "{state}"\n'
        command = ["bash", "-c", SHELL_PRELUDE + text + dump]
    result = subprocess.run(
        command, cwd=page.home, env=page.env, capture_output=True, text=True,
        timeout=BLOCK_TIMEOUT_S,
    )  # fmt: skip
    if block.lang != "python" and result.returncode == 0:
        entries = state.read_bytes().decode().split("\0")
        page.env = dict(entry.split("=", 1) for entry in entries if "=" in entry)
    return result


@pytest.mark.parametrize("block", BLOCKS, ids=lambda block: block.id)
def test_a_documented_block_runs(
    block: Block,
    pages: dict[str, Page],
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    page = _page(pages, block.path, tmp_path_factory)
    text = block.text
    address = _address(block, page, request)
    if address is not None:
        for documented in DOCUMENTED_ADDRESSES:
            text = text.replace(documented, address)
    result = _run(block, page, text)
    assert result.returncode == 0, (
        f"{block.id} ({block.lang}) exited {result.returncode}\n--- block ---\n{block.text}"
        f"--- stdout ---\n{result.stdout[-3000:]}\n--- stderr ---\n{result.stderr[-3000:]}"
    )


def test_the_documented_model_is_the_one_served() -> None:
    """The examples name the default model by the id the server serves it under."""
    documented = "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert any(documented in block.text for block in BLOCKS)
    assert documented == DEFAULT_MODEL_NAME, DEFAULT_MODEL_NAME
