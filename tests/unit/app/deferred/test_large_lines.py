"""A batch line larger than `INLINE_BYTES` is checked and decoded off the event loop
(scripted engine, real keys database on both backends): its validation check, and at run
time its envelope and its body, go through the request-work pool; the small lines stay on
the loop. The batch answers every line as usual."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from app.services.batches import lines as batch_lines
from app.services.batches import validation as batch_validation
from app.transport.request_body import INLINE_BYTES
from tests.unit.app.deferred.test_batches_http import chat_line, create, finished, upload
from tests.unit.app.tenancy.helpers import keyed_app, new_key


async def test_a_large_line_is_checked_and_decoded_off_the_loop(
    database: AsyncEngine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    off: list[tuple[str, int]] = []  # (function, bytes) run in the pool

    def recording(module: Any) -> None:
        real = module.off_loop

        async def off_loop(fn: Callable[..., Any], *args: Any) -> Any:
            off.append((getattr(fn, "__name__", type(fn).__name__), len(args[0])))
            return await real(fn, *args)

        monkeypatch.setattr(module, "off_loop", off_loop)

    recording(batch_validation)
    recording(batch_lines)
    big = "x" * (2 * INLINE_BYTES)
    lines = [chat_line("small-0"), chat_line(big[:12] + "big"), chat_line("small-1")]
    lines[1]["body"]["messages"][0]["content"] = big
    async with keyed_app(database, tmp_path / "spool.jsonl") as (http, tenancy):
        key_id, secret = await new_key(tenancy)
        batch = await create(http, secret, await upload(http, key_id, lines))
        done = await finished(http, secret, batch)
    assert done["status"] == "completed", done
    assert done["request_counts"] == {"total": 3, "completed": 3, "failed": 0}
    assert all(size > INLINE_BYTES for _, size in off), off  # only the large line
    names = [name for name, _ in off]
    assert names.count("check_line") == 1  # validation
    assert names.count("decode") == 1  # its envelope, when it runs
    assert names.count("decode_checked") == 1  # its body, as the endpoint decodes it
