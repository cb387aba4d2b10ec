"""Every command and Python example the documentation tells a reader to run, run as a
reader would run it: README.md and each page of docs/, block by block in page order,
in a fresh empty HOME (so a fresh data directory) with the virtual environment first on
PATH, against a real server where a block talks to one.

Each page runs in a terminal of its own (tests/docs/runner.py: its blocks share one
shell environment, in order, and fail on any failing command or HTTP error).
`127.0.0.1:8000` in a block is the test server's address: the session's e2e server
(`--auth none` on loopback, its admin key in `LILAC_ADMIN_KEY`), except on the tenants
page, whose server runs `--auth keys` over that page's own keys database, started when a
block first needs it (after the page has made its key). Blocks marked
`<!-- not run: REASON -->` are left out; tests/docs/test_blocks.py holds every other
block to the rules.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from engine.checkpoint import DEFAULT_MODEL_NAME
from tests.docs.blocks import Block, all_blocks
from tests.docs.runner import VENV_BIN, Terminal
from tests.e2e.conftest import ADMIN_KEY
from tests.e2e.server import RunningServer, free_port, wait_healthy

BLOCKS = [block for block in all_blocks() if block.runs]
DOCUMENTED_ADDRESSES = ("127.0.0.1:8000", "localhost:8000")
KEYS_PAGES = frozenset({"docs/tenants.md"})


@dataclass
class Page:
    """One page's terminal, and its keys server once started."""

    terminal: Terminal
    server: RunningServer | None = None


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
        # The e2e server's admin key, as a reader would export it.
        extra = {"LILAC_ADMIN_KEY": ADMIN_KEY}
        pages[path] = Page(Terminal(tmp_path_factory.mktemp("home"), extra))
    return pages[path]


def _keys_server(page: Page) -> RunningServer:
    """`lilac-serve serve --auth keys` over the page's keys database, on loopback."""
    if page.server is None:
        port = free_port()
        log_path = page.terminal.home.parent / f"{page.terminal.home.name}-server.log"
        command = [
            str(Path(VENV_BIN) / "lilac-serve"), "serve", "--auth", "keys", "--port", str(port),
            "--max-model-len", "2048", "--cpu-kvcache-space-gib", "1",
        ]  # fmt: skip
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=page.terminal.env,
                cwd=page.terminal.home,
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
    result = page.terminal.run(block, text)
    assert result.returncode == 0, (
        f"{block.id} ({block.lang}) exited {result.returncode}\n--- block ---\n{block.text}"
        f"--- stdout ---\n{result.stdout[-3000:]}\n--- stderr ---\n{result.stderr[-3000:]}"
    )


def test_the_documented_model_is_the_one_served() -> None:
    """The examples name the default model by the id the server serves it under."""
    documented = "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert any(documented in block.text for block in BLOCKS)
    assert documented == DEFAULT_MODEL_NAME, DEFAULT_MODEL_NAME
