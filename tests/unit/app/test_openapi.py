"""GET /openapi.json: an OpenAPI 3.1 document of every route's real bodies, and a
property-based run of the app against it (schemathesis, over the scripted engine,
in-process ASGI): no 5xx, and every response matches the document."""

from __future__ import annotations

import time
from typing import Any

import httpx
import msgspec
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from app.config.settings import Settings
from app.main import create_app
from app.openapi import ROUTES, document
from engine.scripted import ScriptedEngine
from tests.client import scratch_data_dir

EXAMPLES_PER_OPERATION = 20
CASES: list[str] = []  # one entry per case run, for the count below


async def test_document_is_served(client: httpx.AsyncClient) -> None:
    response = await client.get("/openapi.json")
    assert response.status_code == 200
    assert msgspec.json.decode(response.content) == msgspec.json.decode(
        msgspec.json.encode(document())
    )
    assert response.json()["openapi"] == "3.1.0"


async def test_document_covers_every_route(client: httpx.AsyncClient) -> None:
    served = {
        (method.lower(), route.path.replace(":str}", "}").replace(":path}", "}"))
        for route in client.app.routes
        for method in getattr(route, "methods", ())
        if method not in ("HEAD", "OPTIONS") and route.path != "/openapi.json"
    }
    assert served == {(route.method, route.path) for route in ROUTES}


def test_request_bodies_are_the_decoded_types() -> None:
    chat = document()["components"]["schemas"]["ChatCompletionRequest"]
    assert {"messages", "model", "structured_outputs", "reasoning_effort"} <= set(
        chat["properties"]
    )
    assert chat["properties"]["reasoning_effort"]["anyOf"][0]["enum"] == [
        "high",
        "low",
        "max",
        "medium",
        "minimal",
        "none",
        "xhigh",
    ]
    paths = document()["paths"]
    stream = paths["/v1/chat/completions"]["post"]["responses"]["200"]["content"]
    assert set(stream) == {"application/json", "text/event-stream"}


def test_prompt_logprobs_are_documented() -> None:
    schemas = document()["components"]["schemas"]
    bound = schemas["CompletionRequest"]["properties"]["prompt_logprobs"]["anyOf"][0]
    assert (bound["minimum"], bound["maximum"]) == (0, 20)
    assert "prompt_logprobs" in schemas["ChatCompletion"]["properties"]
    assert "prompt_logprobs" in schemas["CompletionChoice"]["properties"]
    assert set(schemas["PromptLogprob"]["required"]) == {"logprob", "rank", "decoded_token"}


# What the fuzzed requests store stays in a scratch folder, not the user's data directory;
# schemathesis's in-process client addresses the app as `testserver`.
_settings = Settings(data_dir=scratch_data_dir(), allowed_hosts=("testserver",))
_app = create_app(_settings, engine=ScriptedEngine(served_names=("scripted",)))
schema = schemathesis.openapi.from_asgi("/openapi.json", _app)
# The coverage phase alone makes thousands of boundary cases (minutes here): the
# explicit examples and EXAMPLES_PER_OPERATION generated ones keep the run short.
schema.config.phases.coverage.enabled = False


@pytest.fixture(scope="module", autouse=True)
def report_case_count() -> object:
    started = time.monotonic()
    yield
    if CASES:  # the property run was selected: say how much it covered
        print(f"\nschemathesis: {len(CASES)} cases in {time.monotonic() - started:.1f} s")


@schema.hook
def map_body(context: object, body: object) -> object:
    # Half the cases name the served model, so that they get past the 404.
    if isinstance(body, dict) and "model" in body and hash(str(body)) % 2:
        body["model"] = "scripted"
    return body


@schema.parametrize()
@settings(
    max_examples=EXAMPLES_PER_OPERATION,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
)
def test_api_conforms_to_its_document(case: schemathesis.Case) -> None:
    CASES.append(case.operation.label)
    case.call_and_validate(
        checks=[
            not_a_server_error,
            status_code_conformance,
            content_type_conformance,
            response_schema_conformance,
        ]
    )


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}),
        ("/v1/messages", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}),
    ],
)
def test_a_stream_conforms_event_by_event(path: str, body: dict[str, Any]) -> None:
    """Each event of a streamed answer (its `data`, and `event` where named) is what the
    document says a stream's event is."""
    operation = schema[path]["POST"]
    case = operation.Case(body={"model": "scripted", "stream": True, "max_tokens": 4, **body})
    response = case.call_and_validate(checks=[response_schema_conformance])
    assert response.status_code == 200
    assert response.headers["content-type"][0].startswith("text/event-stream")
