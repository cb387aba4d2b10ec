"""Image input end to end through vLLM, on a tiny Idefics3 model built locally with random
weights (tests/vision_model.py): images served from 127.0.0.1 and as data URIs reach
vLLM's multi-modal processor, and their tokens count in `prompt_tokens`."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import httpx
import pytest

from app.config.settings import Settings
from engine.vllm_backend.engine import VLLMEngine
from tests.client import app_client, stream_events
from tests.images import ImageServer, Route, data_uri, gif_two_frames, image_server, png
from tests.integration.engines import VISION_MODEL
from tests.vision_model import IMAGE_PROMPT_TOKENS

MODEL = VISION_MODEL


@pytest.fixture(scope="module")
def images() -> Iterator[ImageServer]:
    routes = {
        "/red.png": Route(png((40, 30), "red")),
        "/anim.gif": Route(gif_two_frames(), content_type="image/gif"),
        "/missing.png": Route(b"gone", status=404, content_type="text/plain"),
    }
    with image_server(routes) as server:
        yield server


@pytest.fixture(scope="module")
async def vision_client(vision_engine: VLLMEngine) -> AsyncIterator[httpx.AsyncClient]:
    settings = Settings(allow_private_image_urls=True)
    async with app_client(vision_engine, settings, timeout=300) as c:
        yield c


def image(url: str) -> dict:
    return {"type": "image_url", "image_url": {"url": url}}


TEXT = {"type": "text", "text": "What is in the picture?"}


async def chat(client: httpx.AsyncClient, content: list[dict], **fields: object) -> httpx.Response:
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": content}],
        "max_tokens": 4,
        "temperature": 0,
        **fields,
    }
    return await client.post("/v1/chat/completions", json=body)


async def prompt_tokens(client: httpx.AsyncClient, content: list[dict]) -> int:
    response = await chat(client, content)
    assert response.status_code == 200, response.text
    completion = response.json()
    assert completion["choices"][0]["finish_reason"] in ("stop", "length")
    assert completion["usage"]["completion_tokens"] >= 1
    return completion["usage"]["prompt_tokens"]


async def test_one_image_by_url_counts_its_tokens(
    vision_engine: VLLMEngine, vision_client: httpx.AsyncClient, images: ImageServer
) -> None:
    assert vision_engine.model.supports_vision
    text_only = await prompt_tokens(vision_client, [TEXT])
    with_image = await prompt_tokens(vision_client, [image(images.url("/red.png")), TEXT])
    # One `<image>` placeholder in the template's prompt becomes the image's tokens.
    assert with_image == text_only + IMAGE_PROMPT_TOKENS
    assert ("/red.png", f"127.0.0.1:{images.port}") in images.hits


async def test_two_images_url_and_data_uri(
    vision_engine: VLLMEngine, vision_client: httpx.AsyncClient, images: ImageServer
) -> None:
    text_only = await prompt_tokens(vision_client, [TEXT])
    content = [image(images.url("/anim.gif")), TEXT, image(data_uri(png((64, 20), "green")))]
    assert await prompt_tokens(vision_client, content) == text_only + 2 * IMAGE_PROMPT_TOKENS
    assert vision_engine.unfinished_requests() == 0


async def test_streamed_usage_counts_image_tokens(
    vision_client: httpx.AsyncClient, images: ImageServer
) -> None:
    plain = await prompt_tokens(vision_client, [image(images.url("/red.png")), TEXT])
    response = await chat(
        vision_client,
        [image(images.url("/red.png")), TEXT],
        stream=True,
        stream_options={"include_usage": True},
    )
    assert response.status_code == 200
    usage = stream_events(response)[-1]["usage"]  # ends in data: [DONE]
    assert usage["prompt_tokens"] == plain


async def test_failures_are_400s_and_leave_nothing_running(
    vision_engine: VLLMEngine, vision_client: httpx.AsyncClient, images: ImageServer
) -> None:
    cases = [
        ([TEXT, image(images.url("/missing.png"))], "image_fetch_failed"),
        ([TEXT, image(data_uri(b"plain text", "image/png"))], "invalid_image"),
        ([TEXT, image("data:image/png;base64,???")], "invalid_image"),
    ]
    for content, code in cases:
        response = await chat(vision_client, content)
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert (error["code"], error["param"]) == (code, "messages[0].content[1].image_url")
    assert vision_engine.unfinished_requests() == 0


async def test_text_model_refuses_images(
    real_client: httpx.AsyncClient, real_engine: VLLMEngine, images: ImageServer
) -> None:
    assert not real_engine.model.supports_vision
    hits = len(images.hits)
    body = {
        "model": real_engine.model.name,
        "messages": [{"role": "user", "content": [TEXT, image(images.url("/red.png"))]}],
    }
    response = await real_client.post("/v1/chat/completions", json=body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "image_input_not_supported"
    assert error["param"] == "messages[0].content[1].image_url"
    assert len(images.hits) == hits  # refused before any download
    assert real_engine.unfinished_requests() == 0
