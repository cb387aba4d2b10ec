"""The OpenAPI 3.1 document at GET /openapi.json, built from the wire types themselves.

Routes decode their bodies by hand (one msgspec pass, errors mapped in app.errors), so
Litestar cannot see the body types; each API's module in this package names them in a
table of `Route`s instead, and every schema is msgspec's own JSON Schema (2020-12, the
dialect of OpenAPI 3.1) of the Struct the route decodes or encodes: the document
describes exactly what the decoders accept. tests/unit/app/test_openapi.py holds the
tables to the app's routes.
"""

from __future__ import annotations

import typing
from functools import lru_cache
from typing import Any

import msgspec
from litestar import MediaType, Response, get

from app.openapi import admin, batches, files, health, messages, openai, responses
from app.openapi.common import ERRORS, JSON, REF, SSE, Route
from app.schemas.errors import ErrorEnvelope

# The document lists paths in this order (first route of a path places it).
ROUTES = (
    *openai.GENERATION,
    *messages.ROUTES,
    *responses.CREATE,
    *batches.ROUTES,
    *openai.MODELS,
    *files.ROUTES,
    *responses.STORED,
    *health.ROUTES,
    *admin.ROUTES,
)


def _ref(kind: type) -> dict[str, Any]:
    return {"$ref": REF.format(name=kind.__name__)}


def _name(kind: Any) -> str:
    return getattr(kind, "__name__", "StreamEvent")


def _event_schema(kind: Any) -> dict[str, Any]:
    """A chunk Struct's reference, or for a union of event Structs one of theirs."""
    if isinstance(kind, type):
        return _ref(kind)
    return {"oneOf": [_ref(member) for member in typing.get_args(kind)]}


def _kinds(kind: Any) -> list[type]:
    if kind is None or isinstance(kind, dict):
        return []
    return [kind] if isinstance(kind, type) else list(typing.get_args(kind))


def _schema(kind: type | dict[str, Any]) -> dict[str, Any]:
    return kind if isinstance(kind, dict) else _ref(kind)


def _operation(route: Route) -> dict[str, Any]:
    ok_content: dict[str, Any] = {}
    if route.ok is not None:
        ok_content[route.ok_media] = {"schema": _schema(route.ok)}
    if route.streams is not None:
        ok_content[SSE] = {
            # One event, as SSE parsers (and OpenAPI 3.2's `itemSchema`) see it: its
            # `data` (the JSON text of the chunk) and, on the routes that name them, its
            # `event`.
            "schema": {
                "type": "object",
                "description": route.stream_text.format(name=_name(route.streams)),
                "properties": {
                    "event": {"type": "string"},
                    "data": {"type": "string"},
                    "id": {"type": "string"},
                    "retry": {"type": "integer"},
                },
                "required": ["data"],
            },
            "x-event-schema": _event_schema(route.streams),
        }
    responses: dict[str, Any] = {"200": {"description": "OK", "content": ok_content}}
    for status in route.errors:
        responses[status] = {
            "description": ERRORS[status],
            "content": {JSON: {"schema": _ref(route.error_body)}},
        }
    operation: dict[str, Any] = {"summary": route.summary, "responses": responses}
    path_id = route.path.replace("/", "_").replace("{", "").replace("}", "")
    operation["operationId"] = f"{route.method}{path_id}"
    if route.params:
        operation["parameters"] = [
            {"name": name, "in": where, "required": where == "path", "schema": schema}
            for name, where, schema in route.params
        ]
    if route.body is not None:
        operation["requestBody"] = {
            "required": True,
            "content": {route.body_media: {"schema": _schema(route.body)}},
        }
    return operation


@lru_cache(maxsize=1)
def document() -> dict[str, Any]:
    kinds = {
        kind
        for route in ROUTES
        for part in (route.body, route.ok, route.streams)
        for kind in _kinds(part)
    }
    kinds.update(route.error_body for route in ROUTES)
    kinds.add(ErrorEnvelope)
    _, components = msgspec.json.schema_components(
        sorted(kinds, key=lambda k: k.__name__), ref_template=REF
    )
    paths: dict[str, Any] = {}
    for route in ROUTES:
        paths.setdefault(route.path, {})[route.method] = _operation(route)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "lilac-serve",
            "version": "1",
            "summary": "OpenAI-compatible API, and Anthropic's Messages API",
        },
        "paths": paths,
        "components": {"schemas": components},
    }


_encoded: bytes | None = None


@get("/openapi.json", include_in_schema=False)
async def openapi_json() -> Response[bytes]:
    global _encoded
    if _encoded is None:
        _encoded = msgspec.json.encode(document())
    return Response(_encoded, media_type=MediaType.JSON)
