"""Running a documented block as a reader would: in a terminal of its own page, with a
fresh empty HOME (so a fresh data directory) and the virtual environment first on PATH.

A page's blocks share one shell environment, in order, as one terminal would: what a
block exports is there for the next. A shell block runs under `set -euo pipefail`, so
any failing command fails it, and curl runs with `--fail-with-body` (unless the block
chose a `--fail` of its own), so an HTTP error fails it too.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.docs.blocks import Block

BLOCK_TIMEOUT_S = 300
VENV_BIN = str(Path(sys.executable).parent)
ROOT = Path(__file__).resolve().parents[2]
# The model prepared once for the whole suite: an empty HOME would otherwise mean
# preparing it again (LILAC_CACHE_DIR is the documented way to point at it).
MODEL_CACHE = os.environ.get("LILAC_CACHE_DIR") or str(Path.home() / ".cache" / "lilac-serve")
SHELL_PRELUDE = """set -euo pipefail
curl() {
  local arg
  for arg in "$@"; do
    case "$arg" in --fail*|-[a-zA-Z]*f*) command curl "$@"; return;; esac
  done
  command curl --fail-with-body "$@"
}
"""


class Terminal:
    """One page's shell: its HOME (also the working folder) and its environment."""

    def __init__(self, home: Path, extra_env: dict[str, str] | None = None) -> None:
        self.home = home
        self.env = {
            "HOME": str(home),
            "PATH": f"{VENV_BIN}:/usr/local/bin:/usr/bin:/bin",
            "LANG": "C.UTF-8",
            "LILAC_CACHE_DIR": MODEL_CACHE,
            "HF_HUB_OFFLINE": "1",
            "VLLM_CPU_KVCACHE_SPACE": "1",
            **(extra_env or {}),
        }
        # The code under test, when it is not installed, then the repository's root: a
        # reader runs `python -m perf` from their checkout, where it is on sys.path.
        paths = [os.environ.get("PYTHONPATH", ""), str(ROOT)]
        self.env["PYTHONPATH"] = os.pathsep.join(path for path in paths if path)

    def run(self, block: Block, text: str | None = None) -> subprocess.CompletedProcess[str]:
        """Run the block (or `text`, the block with its addresses replaced)."""
        text = block.text if text is None else text
        state = self.home.parent / f"{self.home.name}-env"
        if block.lang == "python":
            script = self.home.parent / f"{self.home.name}-block-{block.line}.py"
            script.write_text(text)
            command = [str(Path(VENV_BIN) / "python"), str(script)]
        else:
            command = ["bash", "-c", f'{SHELL_PRELUDE}{text}\nenv -0 > "{state}"\n']
        result = subprocess.run(
            command, cwd=self.home, env=self.env, capture_output=True, text=True,
            timeout=BLOCK_TIMEOUT_S,
        )  # fmt: skip
        if block.lang != "python" and result.returncode == 0:
            entries = state.read_bytes().decode().split("\0")
            self.env = dict(entry.split("=", 1) for entry in entries if "=" in entry)
        return result
