"""A reader for a whole server-sent-events body that checks its framing: shared by the
tests' client (tests/client.py) and the micro-benchmarks."""

from __future__ import annotations

import json
from typing import Any

import httpx

DONE = "[DONE]"


def read_sse(source: httpx.Response | bytes | str) -> list[dict[str, Any]]:
    """Every event of a whole SSE body, decoded from JSON, in order.

    Asserts the framing: only `data:` fields (and comments), every event closed by a
    blank line, and `data: [DONE]` exactly once, last. `[DONE]` is not returned. Error
    events are returned like the others (see `assert_no_error_event`)."""
    if isinstance(source, httpx.Response):
        text = source.text
    elif isinstance(source, bytes):
        text = source.decode()
    else:
        text = source
    payloads: list[str] = []
    pending: list[str] | None = None
    # Split on "\n" only: str.splitlines would also split on U+2028 inside a JSON string.
    for line in text.replace("\r\n", "\n").split("\n"):
        if not line:
            if pending is not None:
                payloads.append("\n".join(pending))
                pending = None
        elif line.startswith(":"):
            continue  # a comment
        elif line.startswith("data:"):
            value = line[5:]
            pending = [*(pending or []), value[1:] if value.startswith(" ") else value]
        else:
            raise AssertionError(f"not a data line in the event stream: {line!r}\n{text}")
    assert pending is None, f"the stream ends inside an event: {pending!r}"
    assert payloads, f"no events in the stream: {text!r}"
    assert payloads[-1] == DONE, f"the stream does not end with data: [DONE]: {text[-500:]!r}"
    assert payloads.count(DONE) == 1, f"data: [DONE] more than once: {text!r}"
    events = [json.loads(payload) for payload in payloads[:-1]]
    assert all(isinstance(event, dict) for event in events), events
    return events
