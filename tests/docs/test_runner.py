"""The terminal documented blocks run in: a failing command, an HTTP error and a Python
exception fail a block; what one block exports the next one sees; HOME starts empty."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.docs.blocks import Block
from tests.docs.runner import Terminal


def block(text: str, lang: str = "sh") -> Block:
    return Block(path="page.md", line=1, lang=lang, text=text, not_run=None)


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        status = 200 if self.path == "/ok" else 404
        self.send_response(status)
        self.end_headers()
        self.wfile.write(b"body")

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture
def web() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.fixture
def terminal(tmp_path: Path) -> Terminal:
    home = tmp_path / "home"
    home.mkdir()
    return Terminal(home)


def test_home_starts_empty_and_is_the_working_folder(terminal: Terminal) -> None:
    result = terminal.run(block('test "$PWD" = "$HOME"\nls -A "$HOME" | wc -l\n'))
    assert (result.returncode, result.stdout.strip()) == (0, "0")


def test_a_failing_command_fails_the_block(terminal: Terminal) -> None:
    assert terminal.run(block("false\necho after\n")).returncode == 1
    assert terminal.run(block("false | cat\n")).returncode == 1  # pipefail
    assert terminal.run(block("VALUE=$(false)\n")).returncode == 1


def test_an_http_error_fails_curl_unless_the_block_handles_it(terminal: Terminal, web: str) -> None:
    assert terminal.run(block(f"curl -s {web}/ok\n")).returncode == 0
    missing = terminal.run(block(f"curl -s {web}/missing\n"))
    assert missing.returncode == 22, missing.stderr
    handled = terminal.run(block(f"curl -sf {web}/missing || echo handled\n"))
    assert (handled.returncode, handled.stdout.strip()) == (0, "handled")


def test_an_export_reaches_the_next_block(terminal: Terminal) -> None:
    assert terminal.run(block("VALUE=from-the-first\nexport VALUE\n")).returncode == 0
    later = terminal.run(block('echo "$VALUE"\n'))
    assert later.stdout.strip() == "from-the-first"
    program = terminal.run(block('import os\nprint(os.environ["VALUE"])\n', "python"))
    assert program.stdout.strip() == "from-the-first"


def test_a_python_exception_fails_the_block(terminal: Terminal) -> None:
    result = terminal.run(block("raise SystemExit('no')\n", "python"))
    assert result.returncode == 1 and "no" in result.stderr
