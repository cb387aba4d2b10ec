"""Cross-site requests and secrets against the real server `make serve` starts: JSON
bodies only, CORS for the listed origin only, and the admin key usable over HTTP but
absent from the environment of the engine's processes."""

from __future__ import annotations

import httpx
import psutil

from engine.checkpoint import DEFAULT_MODEL_NAME
from perf.harness.servers import Server
from tests.e2e.conftest import ADMIN_KEY, ALLOWED_ORIGIN

BODY = b'{"model": "%s", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}' % (
    DEFAULT_MODEL_NAME.encode()
)
CHAT = "/v1/chat/completions"


def test_post_bodies_must_be_json(server: Server) -> None:
    with httpx.Client(base_url=server.base_url, timeout=60) as http:
        for content_type in ("text/plain", "application/x-www-form-urlencoded"):
            response = http.post(CHAT, content=BODY, headers={"content-type": content_type})
            assert response.status_code == 415, response.text
            assert response.json()["error"]["code"] == "unsupported_media_type"
        accepted = http.post(
            CHAT, content=BODY, headers={"content-type": "application/json; charset=utf-8"}
        )
        assert accepted.status_code == 200, accepted.text
        deep = b'{"x": ' + b"[" * 3000 + b"]" * 3000 + b"}"
        too_deep = http.post(CHAT, content=deep, headers={"content-type": "application/json"})
        assert too_deep.status_code == 400 and too_deep.json()["error"]["code"] == "json_too_deep"


def test_cors_only_for_the_allowed_origin(server: Server) -> None:
    with httpx.Client(base_url=server.base_url, timeout=60) as http:
        preflight = http.options(
            CHAT,
            headers={
                "origin": ALLOWED_ORIGIN,
                "access-control-request-method": "POST",
                "access-control-request-headers": "content-type",
            },
        )
        assert preflight.headers.get("access-control-allow-origin") == ALLOWED_ORIGIN
        other = http.options(
            CHAT,
            headers={"origin": "http://evil.example", "access-control-request-method": "POST"},
        )
        assert "access-control-allow-origin" not in other.headers
        response = http.get("/v1/models", headers={"origin": "http://evil.example"})
        assert "access-control-allow-origin" not in response.headers


def test_admin_key_works_and_stays_out_of_the_engine_processes(server: Server) -> None:
    with httpx.Client(base_url=server.base_url, timeout=60) as http:
        ok = http.get("/admin/admission/", headers={"authorization": f"Bearer {ADMIN_KEY}"})
        assert ok.status_code == 200, ok.text
        # Raw bytes: a client may send any header bytes; httpx would refuse a non-ASCII str.
        non_ascii = "Bearer cl\u00e9".encode()
        wrong = http.get("/admin/admission/", headers={"authorization": non_ascii})
        assert wrong.status_code == 401
    main = psutil.Process(server.process.pid)
    # The worker's children (the engine core and its helpers) start after the worker has
    # read its settings: none of them may inherit the key.
    spawned = [p for child in main.children() for p in child.children(recursive=True)]
    assert spawned, "no engine processes found under the server's worker"
    for process in spawned:
        environ = process.environ()
        assert "LILAC_ADMIN_KEY" not in environ, process.cmdline()
        assert "LILAC_SETTINGS_JSON" not in environ, process.cmdline()
        assert ADMIN_KEY not in " ".join(process.cmdline())
