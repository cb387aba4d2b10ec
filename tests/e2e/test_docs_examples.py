"""Every command and Python example the documentation tells a reader to run, run as a
reader would run it: README.md and each page of docs/, block by block in page order,
in a fresh empty HOME (so a fresh data directory) with the virtual environment first on
PATH, against a real server where a block talks to one.

Each page runs in a terminal of its own (tests/docs/runner.py: its blocks share one
shell environment, in order, and fail on any failing command or HTTP error).
`127.0.0.1:8000` in a block is the test server's address: the session's e2e server
(`--auth none` on loopback, its admin key in `LILAC_ADMIN_KEY`), except on the tenants
page, whose server runs `--auth keys` over that page's own keys database, launched as
soon as the page has made its key. Its blocks up to that one run first (this module
runs first of tests/e2e) and the rest last, so that the server (a minute of one core)
starts beside the shared servers and is up by the time the other pages have run.
Blocks marked `<!-- not run: REASON -->` are left out; tests/docs/test_blocks.py holds
every other block to the rules.

The tenants page's walkthrough is also held to what its text says each step does
(TENANT_CHECKS): the key's form and the database in the empty HOME's data directory, a
completion for the key, one usage row per call, and a revoked key refused with a 401.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import httpx
import pytest

from engine.checkpoint import DEFAULT_MODEL_NAME
from perf.harness.servers import Server, free_port, lilac_argv
from tests.docs.blocks import Block, all_blocks
from tests.docs.runner import Terminal
from tests.e2e.conftest import ADMIN_KEY

DOCUMENTED_ADDRESSES = ("127.0.0.1:8000", "localhost:8000")
KEYS_PAGES = frozenset({"docs/tenants.md"})
KEY_CREATE = "lilac-serve keys create"
# vLLM's own cache (what it learnt of the model's architecture, read at every start): the
# suite's, as the model is (LILAC_CACHE_DIR). In the empty HOME vLLM would inspect the
# architecture again in a process of its own (half a minute of a core here); the page's
# data directory, what the walkthrough is about, stays the fresh HOME's.
VLLM_CACHE = os.environ.get("VLLM_CACHE_ROOT") or os.path.join(
    os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "vllm"
)


def run_order(blocks: list[Block]) -> list[Block]:
    """Page order, except that the keys pages' blocks after the one that makes the key
    run after every other page's (each page keeps its own order)."""
    keyed = [block for block in blocks if block.path in KEYS_PAGES]
    made = next((i + 1 for i, block in enumerate(keyed) if KEY_CREATE in block.text), 0)
    others = [block for block in blocks if block.path not in KEYS_PAGES]
    return keyed[:made] + others + keyed[made:]


BLOCKS = run_order([block for block in all_blocks() if block.runs])


@dataclass
class Page:
    """One page's terminal, and its keys server once started."""

    terminal: Terminal
    server: Server | None = None
    key_id: str = ""  # the key the tenants page made


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Page]]:
    opened: dict[str, Page] = {}
    yield opened
    for page in opened.values():
        if page.server is not None:
            page.server.kill_all()


def _page(pages: dict[str, Page], path: str, tmp_path_factory: pytest.TempPathFactory) -> Page:
    if path not in pages:
        # The e2e server's admin key, as a reader would export it.
        extra = {"LILAC_ADMIN_KEY": ADMIN_KEY}
        pages[path] = Page(Terminal(tmp_path_factory.mktemp("home"), extra))
    return pages[path]


def _launch_keys_server(page: Page) -> None:
    """`lilac-serve serve --auth keys` over the page's keys database, on loopback,
    launched (`_keys_server` waits for it)."""
    if page.server is None:
        port = free_port()
        log_path = page.terminal.home.parent / f"{page.terminal.home.name}-server.log"
        command = lilac_argv(
            port, "--auth", "keys", "--max-model-len", "2048", "--cpu-kvcache-space-gib", "1",
            "--grammar-warmup", "false",  # no block of the page sends a grammar
        )  # fmt: skip
        page.server = Server(
            command,
            log_path,
            port=port,
            environ={**page.terminal.env, "VLLM_CACHE_ROOT": VLLM_CACHE},
            cwd=page.terminal.home,
        )


def _keys_server(page: Page) -> Server:
    """The page's keys server, once healthy."""
    _launch_keys_server(page)
    assert page.server is not None
    return page.server.wait_healthy(600)


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
    if block.path in KEYS_PAGES:
        for trigger, check in TENANT_CHECKS.items():
            if trigger in block.text:
                check(page, result)
        if KEY_CREATE in block.text:
            _launch_keys_server(page)


# The walkthrough's two calls with the key: the curl block and the Python block.
WALKTHROUGH_CALLS = 2
KEY_FORMAT = re.compile(r"lilac-sk-[A-Za-z0-9_-]{43}")
CREATED = re.compile(r"^created (key_[0-9a-f]{12}) \(acme\)", re.MULTILINE)
Result = subprocess.CompletedProcess[str]


def _key_was_made(page: Page, result: Result) -> None:
    """`keys create` printed the key alone on stdout, its id on stderr, and made the
    database in the data directory of a fresh HOME."""
    secret = page.terminal.env.get("LILAC_KEY", "")
    assert KEY_FORMAT.fullmatch(secret) and len(secret) == 52, secret
    assert result.stdout == "", result.stdout  # the key went into LILAC_KEY, nothing else
    found = CREATED.search(result.stderr)
    assert found is not None, result.stderr
    page.key_id = found.group(1)
    assert (page.terminal.home / ".local/share/lilac-serve/lilac.db").is_file()


def _key_completed(page: Page, result: Result) -> None:
    assert '"chat.completion"' in result.stdout.replace(" ", ""), result.stdout


def _sdk_completed(page: Page, result: Result) -> None:
    """The Python block printed the reply's usage: tokens were counted for it."""
    found = re.search(r"total_tokens=(\d+)", result.stdout)
    assert found is not None and int(found.group(1)) > 0, result.stdout


def _usage_and_revocation(page: Page, result: Result) -> None:
    """The usage block: one row of the key, one request per call, every one completed;
    `keys list` never shows the secret; the limits changed; then the key is refused."""
    assert page.key_id, "the page's `keys create` block did not run first"
    header = next(line for line in result.stdout.splitlines() if line.startswith("key "))
    row = next(line for line in result.stdout.splitlines() if line.startswith(page.key_id))
    usage = dict(zip(header.split(), row.split(), strict=True))
    assert usage["requests"] == usage["completed"] == str(WALKTHROUGH_CALLS), usage
    assert int(usage["total_tokens"]) > 0 and usage["refused"] == "0", usage
    secret = page.terminal.env["LILAC_KEY"]
    assert secret not in result.stdout
    assert '"rpm": 120' in result.stdout
    assert f"revoked {page.key_id} (acme)" in result.stdout
    time.sleep(1.1)  # a revocation reaches every replica within a second
    assert page.server is not None
    refused = httpx.get(
        f"{page.server.base_url}/v1/models",
        headers={"Authorization": f"Bearer {secret}"},
        timeout=10,
    )
    assert refused.status_code == 401, refused.text
    assert refused.json()["error"]["code"] == "invalid_api_key", refused.text


# What a block of the tenants page holds -> what its step must have done.
TENANT_CHECKS: dict[str, Callable[[Page, Result], None]] = {
    KEY_CREATE: _key_was_made,
    "/v1/chat/completions": _key_completed,
    "client.chat.completions.create(": _sdk_completed,
    "lilac-serve keys revoke": _usage_and_revocation,
}


def test_every_tenant_check_has_its_block() -> None:
    """Each check meets exactly one running block of the tenants page, so none is lost
    when the page changes."""
    for trigger in TENANT_CHECKS:
        found = [block.id for block in BLOCKS if block.path in KEYS_PAGES and trigger in block.text]
        assert len(found) == 1, (trigger, found)


def test_the_documented_model_is_the_one_served() -> None:
    """The examples name the default model by the id the server serves it under."""
    documented = "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert any(documented in block.text for block in BLOCKS)
    assert documented == DEFAULT_MODEL_NAME, DEFAULT_MODEL_NAME
