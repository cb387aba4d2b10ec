"""The image loader: every accepted format, and every failure as a 400 naming its part."""

from __future__ import annotations

import asyncio
import base64
import time
from typing import Any

import httpx
import pytest
from PIL import Image

from app.errors import InvalidRequest
from app.schemas.chat import ImagePart, ImageURL, TextPart, UserMessage
from app.services.images.addresses import is_public
from app.services.images.service import ImageLimits, ImageLoader, template_content
from engine.errors import EngineUnavailable
from engine.scripted import ScriptedEngine
from tests.images import (
    Route,
    data_uri,
    encode,
    gif_two_frames,
    image_server,
    png,
    png_header_only,
)

VISION = ScriptedEngine(supports_vision=True)
PRIVATE_OK = ImageLimits(allow_private=True)


def user(*parts: str | tuple[str, str]) -> UserMessage:
    """A user message: strings are text parts, ("img", url) tuples image parts."""
    content: list[TextPart | ImagePart] = []
    for part in parts:
        if isinstance(part, tuple):
            content.append(ImagePart(ImageURL(part[1])))
        else:
            content.append(TextPart(part))
    return UserMessage(content=content)


async def load(*urls: str, limits: ImageLimits = PRIVATE_OK, **loader: Any) -> list[Any]:
    """Load `urls` as the image parts 1.. of message 1 (message 0 is text only)."""
    messages = [UserMessage("hello"), user("look:", *(("img", url) for url in urls))]
    images = await ImageLoader(limits, **loader).load(messages, VISION)
    return [item.image for item in images]


async def fails(*urls: str, limits: ImageLimits = PRIVATE_OK, **loader: Any) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as caught:
        await load(*urls, limits=limits, **loader)
    error = caught.value
    assert error.status_code == 400
    assert error.error_type == "invalid_request_error"
    return error


# ---------------------------------------------------------------- formats


@pytest.mark.parametrize(
    ("fmt", "options"),
    [("PNG", {}), ("JPEG", {"quality": 95}), ("WEBP", {"lossless": True}), ("GIF", {})],
)
async def test_each_format_from_a_data_uri(fmt: str, options: dict[str, Any]) -> None:
    data = encode(Image.new("RGB", (20, 10), (200, 30, 30)), fmt, **options)
    (image,) = await load(data_uri(data, f"image/{fmt.lower()}"))
    assert image.mode == "RGB"
    assert image.size == (20, 10)
    red, green, blue = image.getpixel((5, 5))
    assert red > 150 and green < 80 and blue < 80


async def test_gif_gives_its_first_frame() -> None:
    (image,) = await load(data_uri(gif_two_frames(), "image/gif"))
    assert image.mode == "RGB"
    red, _, blue = image.getpixel((8, 8))
    assert red > 200 and blue < 50  # the red first frame, not the blue second


async def test_transparency_goes_over_white() -> None:
    data = encode(Image.new("RGBA", (4, 4), (0, 0, 0, 0)), "PNG")
    (image,) = await load(data_uri(data))
    assert image.getpixel((1, 1)) == (255, 255, 255)


async def test_media_type_may_be_left_out_and_base64_may_wrap() -> None:
    encoded = base64.encodebytes(png()).decode()  # line breaks every 76 characters
    assert "\n" in encoded.strip()
    (image,) = await load(f"data:;base64,{encoded}")
    assert image.size == (32, 24)


async def test_url_and_data_uri_in_order() -> None:
    with image_server({"/a.png": Route(png((8, 8), "blue"))}) as server:
        first, second = await load(server.url("/a.png"), data_uri(png((9, 9))))
    assert first.size == (8, 8) and first.getpixel((0, 0)) == (0, 0, 255)
    assert second.size == (9, 9)
    assert [path for path, _ in server.hits] == ["/a.png"]


async def test_redirects_are_followed() -> None:
    with image_server() as server:
        server.routes["/old"] = Route(status=302, location=server.url("/new.png"))
        server.routes["/new.png"] = Route(png((5, 5)))
        (image,) = await load(server.url("/old"))
    assert image.size == (5, 5)


async def test_the_resolved_address_is_the_one_connected_to() -> None:
    async def resolve(host: str, port: int) -> list[str]:
        assert host == "images.example"
        return ["127.0.0.1"]

    with image_server({"/x.png": Route(png())}) as server:
        url = f"http://images.example:{server.port}/x.png"
        (image,) = await load(url, resolver=resolve)
    assert image.size == (32, 24)
    assert server.hits == [("/x.png", f"images.example:{server.port}")]


def test_template_content_keeps_images_in_place() -> None:
    message = user("a", ("img", "data:,"), "b")
    assert template_content(message.content) == [
        {"type": "text", "text": "a"},
        {"type": "image"},
        {"type": "text", "text": "b"},
    ]
    assert template_content([TextPart("a"), TextPart("b")]) == "a\nb"
    assert template_content("plain") == "plain"


# ---------------------------------------------------------------- failures


async def test_bad_base64() -> None:
    error = await fails("data:image/png;base64,not*base64!")
    assert error.param == "messages[1].content[1].image_url"
    assert error.code == "invalid_image"
    assert "base64" in error.message


@pytest.mark.parametrize(
    ("url", "code"),
    [
        ("data:image/png;base64", "invalid_image_url"),  # no comma
        ("data:image/png,rawbytes", "invalid_image_url"),  # not base64
        (data_uri(png(), "text/plain"), "invalid_image"),  # not an image type
        ("ftp://example.com/a.png", "invalid_image_url"),
        ("file:///etc/passwd", "invalid_image_url"),
        ("just-a-path.png", "invalid_image_url"),
    ],
)
async def test_malformed_urls(url: str, code: str) -> None:
    error = await fails(url)
    assert (error.param, error.code) == ("messages[1].content[1].image_url", code)


async def test_not_an_image() -> None:
    error = await fails(data_uri(b"<html>hello</html>"))
    assert error.code == "invalid_image"
    assert "not an image" in error.message


async def test_unsupported_format() -> None:
    error = await fails(data_uri(encode(Image.new("RGB", (4, 4)), "BMP"), "image/bmp"))
    assert error.code == "invalid_image"
    assert "PNG, JPEG, WebP, GIF" in error.message


async def test_truncated_image() -> None:
    data = encode(Image.effect_noise((64, 64), 50).convert("RGB"), "PNG")
    error = await fails(data_uri(data[: len(data) // 2]))
    assert error.code == "invalid_image"
    assert "could not be decoded" in error.message


async def test_too_many_bytes_in_a_data_uri() -> None:
    limits = ImageLimits(allow_private=True, max_bytes=1000)
    error = await fails(data_uri(b"\x00" * 5000), limits=limits)
    assert (error.code, error.param) == ("image_too_large", "messages[1].content[1].image_url")


async def test_too_many_pixels() -> None:
    limits = ImageLimits(allow_private=True, max_pixels=100)
    error = await fails(data_uri(png((20, 20))), limits=limits)
    assert error.code == "image_too_large"
    assert "20x20" in error.message


async def test_decompression_bomb_refused_on_its_header() -> None:
    # 100000 x 100000 pixels claimed, none present: refused as too large, not as truncated,
    # so the limit is checked before decoding.
    error = await fails(data_uri(png_header_only(100_000, 100_000)))
    assert error.code == "image_too_large"
    assert "pixels" in error.message


async def test_too_large_by_content_length() -> None:
    limits = ImageLimits(allow_private=True, max_bytes=1000)
    with image_server({"/big.png": Route(b"\x00" * 5000)}) as server:
        error = await fails(server.url("/big.png"), limits=limits)
    assert error.code == "image_too_large"


async def test_too_large_while_streaming() -> None:
    limits = ImageLimits(allow_private=True, max_bytes=10_000)
    with image_server({"/big.png": Route(b"\x00" * 100_000, chunked=True)}) as server:
        error = await fails(server.url("/big.png"), limits=limits)
    assert error.code == "image_too_large"


async def test_http_error_status() -> None:
    with image_server() as server:
        error = await fails(server.url("/missing.png"))
    assert error.code == "image_fetch_failed"
    assert "HTTP 404" in error.message


async def test_not_an_image_over_http() -> None:
    with image_server({"/page": Route(b"<html></html>", content_type="text/html")}) as server:
        error = await fails(server.url("/page"))
    assert error.code == "invalid_image"


async def test_unreachable() -> None:
    with image_server() as server:
        port = server.port  # closed once the server is gone
    error = await fails(f"http://127.0.0.1:{port}/a.png")
    assert error.code == "image_fetch_failed"
    assert error.param == "messages[1].content[1].image_url"


async def test_unresolvable_host() -> None:
    async def resolve(host: str, port: int) -> list[str]:
        raise OSError("Name or service not known")

    error = await fails("http://nowhere.invalid/a.png", resolver=resolve)
    assert error.code == "image_fetch_failed"
    assert "could not be resolved" in error.message


async def test_timeout() -> None:
    limits = ImageLimits(allow_private=True, fetch_timeout_s=0.3)
    with image_server({"/slow.png": Route(png(), delay_s=3)}) as server:
        started = time.monotonic()
        error = await fails(server.url("/slow.png"), limits=limits)
        assert time.monotonic() - started < 2
    assert error.code == "image_fetch_timeout"
    assert "0.3 s" in error.message


async def test_too_many_redirects() -> None:
    with image_server() as server:
        server.routes["/loop"] = Route(status=302, location=server.url("/loop"))
        error = await fails(server.url("/loop"))
    assert error.code == "image_fetch_failed"
    assert "redirects" in error.message


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1/a.png",
        "http://10.1.2.3/a.png",
        "http://192.168.0.10/a.png",
        "http://169.254.169.254/latest/meta-data",
        "http://100.64.0.1/a.png",
        "http://0.0.0.0/a.png",
        "http://[::1]/a.png",
        "http://[fe80::1]/a.png",
        "http://[fd00::1]/a.png",
        "http://[::ffff:127.0.0.1]/a.png",
        "http://[fec0::1]/a.png",
        "http://[3fff::1]/a.png",
    ],
)
async def test_private_addresses_refused_by_default(url: str) -> None:
    error = await fails(url, limits=ImageLimits())
    assert error.code == "image_url_not_allowed"
    assert error.param == "messages[1].content[1].image_url"


async def test_a_name_resolving_to_a_private_address_is_refused() -> None:
    async def resolve(host: str, port: int) -> list[str]:
        return ["93.184.216.34", "127.0.0.1"]  # any private answer refuses it

    with image_server({"/a.png": Route(png())}) as server:
        error = await fails(
            f"http://sneaky.example:{server.port}/a.png", limits=ImageLimits(), resolver=resolve
        )
    assert error.code == "image_url_not_allowed"
    assert server.hits == []


async def test_a_redirect_to_a_private_address_is_refused() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(302, headers={"Location": "http://127.0.0.1/secret.png"})

    async def resolve(host: str, port: int) -> list[str]:
        return ["93.184.216.34"]

    error = await fails(
        "http://public.example/a.png",
        limits=ImageLimits(),
        resolver=resolve,
        transport=httpx.MockTransport(handler),
    )
    assert error.code == "image_url_not_allowed"
    assert len(seen) == 1
    assert seen[0].url.host == "93.184.216.34"
    assert seen[0].headers["Host"] == "public.example"


def test_is_public() -> None:
    import ipaddress

    assert is_public(ipaddress.ip_address("93.184.216.34"))
    assert is_public(ipaddress.ip_address("2606:4700::1111"))
    for private in ("127.0.0.1", "10.0.0.1", "172.16.0.1", "169.254.1.1", "224.0.0.1", "::1"):
        assert not is_public(ipaddress.ip_address(private))


async def test_first_failure_cancels_the_rest() -> None:
    # A slow fetch and one that fails later: the error comes at once and names the bad
    # part, and the fetch that was under way is cancelled, leaving no task behind.
    routes = {"/slow.png": Route(png(), delay_s=3), "/gone": Route(status=404, delay_s=0.3)}
    with image_server(routes) as server:
        started = time.monotonic()
        error = await fails(server.url("/slow.png"), server.url("/gone"))
        elapsed = time.monotonic() - started
        assert sorted(path for path, _ in server.hits) == ["/gone", "/slow.png"]
    assert error.param == "messages[1].content[2].image_url"
    assert error.code == "image_fetch_failed"
    assert elapsed < 1.5
    leftover = [t for t in asyncio.all_tasks() if "load_one" in repr(t.get_coro())]
    assert leftover == []


async def test_malformed_parts_fail_before_any_fetch() -> None:
    with image_server({"/a.png": Route(png())}) as server:
        error = await fails(server.url("/a.png"), data_uri(b"x"), "data:image/png;base64,!!!")
    assert error.param == "messages[1].content[3].image_url"
    assert server.hits == []


# ---------------------------------------------------------------- request-level checks


async def test_too_many_images_names_the_first_over_the_limit() -> None:
    limits = ImageLimits(allow_private=True, max_images=2)
    error = await fails(*[data_uri(png())] * 3, limits=limits)
    assert (error.code, error.param) == ("too_many_images", "messages[1].content[3].image_url")


async def test_model_without_vision_refused_before_any_fetch() -> None:
    with image_server({"/a.png": Route(png())}) as server:
        messages = [user("what is it?", ("img", server.url("/a.png")))]
        loader = ImageLoader(PRIVATE_OK)
        with pytest.raises(InvalidRequest) as caught:
            await loader.load(messages, ScriptedEngine())
    assert caught.value.code == "image_input_not_supported"
    assert caught.value.param == "messages[0].content[1].image_url"
    assert "does not accept image input" in caught.value.message
    assert server.hits == []


async def test_engine_not_ready() -> None:
    with pytest.raises(EngineUnavailable):
        await ImageLoader().load(
            [user(("img", data_uri(png())))], ScriptedEngine(ready=False, supports_vision=True)
        )


async def test_no_images_no_work() -> None:
    assert await ImageLoader().load([UserMessage("hi")], ScriptedEngine()) == []


# ---------------------------------------------------------------- encodings, pools, budget


def stacked_gzip(layers: int, size: int) -> bytes:
    """`size` zero bytes gzipped `layers` times: a few hundred bytes that expand hugely."""
    import gzip

    data = bytes(size)
    for _ in range(layers):
        data = gzip.compress(data, compresslevel=9)
    return data


async def test_encoded_bodies_are_refused_not_decompressed() -> None:
    bomb = stacked_gzip(3, 200 * 1024 * 1024)
    assert len(bomb) < 10_000
    routes = {"/bomb.png": Route(bomb, encoding="gzip, gzip, gzip")}
    with image_server(routes) as server:
        started = time.perf_counter()
        error = await fails(server.url("/bomb.png"))
        assert time.perf_counter() - started < 2  # nothing was inflated
    assert error.code == "image_fetch_failed"
    assert "Content-Encoding" in error.message
    assert server.accept_encodings == ["identity"]


async def test_identity_encoding_is_accepted() -> None:
    with image_server({"/a.png": Route(png(), encoding="identity")}) as server:
        (image,) = await load(server.url("/a.png"))
    assert image.size == (32, 24)
    assert server.accept_encodings == ["identity"]


async def test_decoding_runs_in_its_own_pool() -> None:
    import threading

    import app.services.images.service as images

    seen: list[str] = []
    original = images.decode_image

    def recording(*args: Any) -> Any:
        seen.append(threading.current_thread().name)
        return original(*args)

    images.decode_image = recording
    try:
        await load(data_uri(png()))
    finally:
        images.decode_image = original
    assert seen and seen[0].startswith("lilac-image")


async def test_image_bytes_in_flight_are_bounded_across_requests() -> None:
    from app.errors import ServiceUnavailable

    limits = ImageLimits(allow_private=True, max_bytes=300_000, bytes_in_flight=300_000)
    loader = ImageLoader(limits)
    big = png((400, 400), "blue")  # under max_bytes alone; two of them are over the bound
    routes = {"/b.png": Route(big)}
    with image_server(routes) as server:
        messages = [user(("img", data_uri(big)))]
        loader.budget.take(limits.bytes_in_flight - 10, "other")  # another client's image
        with pytest.raises(ServiceUnavailable) as caught:
            await loader.load(messages, VISION)
        assert caught.value.status_code == 503 and caught.value.code == "images_busy"
        loader.budget.give(limits.bytes_in_flight - 10, "other")
        (loaded,) = await loader.load([user(("img", server.url("/b.png")))], VISION)
    assert loaded.image.size == (400, 400)
    assert loader.budget.used == 0  # given back once decoded


@pytest.mark.parametrize(
    ("host", "inner"),
    [
        ("[64:ff9b::a00:5]", "NAT64 -> 10.0.0.5"),
        ("[64:ff9b:1::7f00:1]", "local NAT64 -> 127.0.0.1"),
        ("[2002:a00:5::1]", "6to4 -> 10.0.0.5"),
        ("[2001:0:4136:e378:8000:63bf:f5ff:fffe]", "Teredo -> 10.0.0.1"),
        ("[::a00:5]", "IPv4-compatible -> 10.0.0.5"),
        ("[::ffff:a00:5]", "IPv4-mapped -> 10.0.0.5"),
        ("240.0.0.1", "reserved"),
        ("[2001:db8::1]", "documentation"),
    ],
)
async def test_wrapped_and_reserved_addresses_are_refused(host: str, inner: str) -> None:
    error = await fails(f"http://{host}/a.png", limits=ImageLimits())
    assert error.code == "image_url_not_allowed", inner


async def test_refusal_names_the_host_not_the_address() -> None:
    async def resolve(host: str, port: int) -> list[str]:
        return ["10.1.2.3"]

    error = await fails("http://intranet.example/a.png", limits=ImageLimits(), resolver=resolve)
    assert error.code == "image_url_not_allowed"
    assert "intranet.example" in error.message
    assert "10.1.2.3" not in error.message


def test_public_addresses_inside_wrappers_stay_public() -> None:
    import ipaddress

    for address in ("64:ff9b::808:808", "2002:808:808::1", "::ffff:8.8.8.8"):
        assert is_public(ipaddress.ip_address(address)), address


async def test_one_clients_images_cannot_exhaust_the_byte_budget_for_another() -> None:
    from app.errors import TooManyRequests

    # Room for three of the largest images; a client alone may hold two (one is kept
    # for a client that holds nothing).
    limits = ImageLimits(allow_private=True, max_bytes=300_000, bytes_in_flight=900_000)
    loader = ImageLoader(limits)
    assert loader.budget.share("key:a") == 600_000
    loader.budget.take(600_000, "key:a")  # a's large images, being fetched
    image = png((64, 64), "red")
    with pytest.raises(TooManyRequests) as caught:
        await loader.load([user(("img", data_uri(image)))], VISION, "key:a")
    assert caught.value.status_code == 429 and caught.value.code == "image_share_exceeded"
    # b holds nothing: its image loads while a's are in flight ...
    (loaded,) = await loader.load([user(("img", data_uri(image)))], VISION, "key:b")
    assert loaded.image.size == (64, 64)
    # ... and with b holding bytes too, the shares shrink to what is left after the
    # reserve, split between the two.
    loader.budget.take(100_000, "key:b")
    assert loader.budget.share("key:a") == loader.budget.share("key:b") == 300_000
    assert loader.budget.share("key:c") == 300_000  # a third client: still one image
    loader.budget.give(100_000, "key:b")
    loader.budget.give(600_000, "key:a")
    assert loader.budget.used == 0 and loader.budget.held("key:a") == 0
