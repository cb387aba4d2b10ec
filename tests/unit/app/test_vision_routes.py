"""Image input through the HTTP layer, over a scripted engine that records what it got."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from app.config.settings import Settings
from engine.scripted import ScriptedEngine
from tests.client import app_client, stream_events
from tests.images import Route, data_uri, image_server, png


@pytest.fixture
def vision_engine() -> ScriptedEngine:
    return ScriptedEngine(supports_vision=True)


@pytest.fixture
async def vision_client(vision_engine: ScriptedEngine) -> AsyncIterator[httpx.AsyncClient]:
    async with app_client(vision_engine, Settings(allow_private_image_urls=True)) as http:
        yield http


def image(url: str, detail: str | None = None) -> dict:
    part: dict = {"type": "image_url", "image_url": {"url": url}}
    if detail is not None:
        part["image_url"]["detail"] = detail
    return part


def chat(*messages: dict, **fields: object) -> dict:
    return {"model": "scripted", "messages": list(messages), **fields}


async def test_images_reach_the_engine_in_place(
    vision_client: httpx.AsyncClient, vision_engine: ScriptedEngine
) -> None:
    with image_server({"/cat.png": Route(png((10, 10), "blue"))}) as server:
        body = chat(
            {"role": "system", "content": "Be brief."},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Compare"},
                    image(server.url("/cat.png"), "low"),
                    {"type": "text", "text": "with"},
                    image(data_uri(png((7, 7)))),
                ],
            },
        )
        response = await vision_client.post("/v1/chat/completions", json=body)
    assert response.status_code == 200, response.text
    (request,) = vision_engine.requests
    assert request.messages[0] == {"role": "system", "content": "Be brief."}
    assert request.messages[1]["content"] == [
        {"type": "text", "text": "Compare"},
        {"type": "image"},
        {"type": "text", "text": "with"},
        {"type": "image"},
    ]
    assert [(i.image.size, i.detail) for i in request.images] == [
        ((10, 10), "low"),
        ((7, 7), "auto"),
    ]
    assert request.images[0].image.getpixel((0, 0)) == (0, 0, 255)


async def test_streaming_with_an_image(vision_client: httpx.AsyncClient) -> None:
    body = chat(
        {"role": "user", "content": [image(data_uri(png()))]},
        stream=True,
    )
    response = await vision_client.post("/v1/chat/completions", json=body)
    assert response.status_code == 200
    stream_events(response)  # ends in data: [DONE]


async def test_model_without_vision_is_a_400(
    client: httpx.AsyncClient, scripted_engine: ScriptedEngine
) -> None:
    body = chat(
        {"role": "user", "content": [{"type": "text", "text": "hi"}, image("https://x.y/a.png")]}
    )
    response = await client.post("/v1/chat/completions", json=body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "image_input_not_supported"
    assert error["param"] == "messages[0].content[1].image_url"
    assert "does not accept image input" in error["message"]
    assert scripted_engine.requests == []


async def test_bad_image_is_a_400_and_nothing_runs(
    vision_client: httpx.AsyncClient, vision_engine: ScriptedEngine
) -> None:
    body = chat(
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": [image(data_uri(png())), image("data:image/png;base64,@@")]},
        stream=True,
    )
    response = await vision_client.post("/v1/chat/completions", json=body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["param"] == "messages[2].content[1].image_url"
    assert vision_engine.requests == []
    assert vision_engine.unfinished_requests() == 0


async def test_private_urls_refused_without_the_flag() -> None:
    engine = ScriptedEngine(supports_vision=True)
    async with app_client(engine, Settings()) as c:
        with image_server({"/a.png": Route(png())}) as server:
            body = chat({"role": "user", "content": [image(server.url("/a.png"))]})
            response = await c.post("/v1/chat/completions", json=body)
            assert server.hits == []
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "image_url_not_allowed"
    assert engine.requests == []


async def test_too_many_images(vision_client: httpx.AsyncClient) -> None:
    parts = [image(data_uri(png()))] * 9  # the default limit is 8
    response = await vision_client.post(
        "/v1/chat/completions", json=chat({"role": "user", "content": parts})
    )
    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["code"], error["param"]) == (
        "too_many_images",
        "messages[0].content[8].image_url",
    )


@pytest.mark.parametrize("role", ["system", "developer", "assistant"])
async def test_images_only_in_user_messages(vision_client: httpx.AsyncClient, role: str) -> None:
    body = chat(
        {"role": role, "content": [image(data_uri(png()))]}, {"role": "user", "content": "hi"}
    )
    response = await vision_client.post("/v1/chat/completions", json=body)
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "messages[0].content[0].type"


@pytest.mark.parametrize(
    ("part", "param"),
    [
        ({"type": "image_url", "image_url": {"url": "x", "detail": "max"}}, "image_url.detail"),
        ({"type": "image_url", "image_url": {}}, "image_url.url"),
        ({"type": "image_url"}, "image_url"),
        ({"type": "image_url", "image_url": "data:image/png;base64,"}, "image_url"),
    ],
)
async def test_malformed_parts(vision_client: httpx.AsyncClient, part: dict, param: str) -> None:
    response = await vision_client.post(
        "/v1/chat/completions", json=chat({"role": "user", "content": [part]})
    )
    assert response.status_code == 400
    assert response.json()["error"]["param"] == f"messages[0].content[0].{param}"


async def test_tokenize_refuses_images(vision_client: httpx.AsyncClient) -> None:
    body = {"messages": [{"role": "user", "content": [image(data_uri(png()))]}]}
    response = await vision_client.post("/tokenize", json=body)
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "messages[0].content[0].image_url"
