"""Image input of chat requests: find the `image_url` parts, load and decode them.

An image comes as a base64 `data:` URI or as an http(s) URL fetched here, with a time
limit, a size limit and a limit on images per request. URLs that resolve to private,
loopback, link-local or other non-public addresses are refused unless the operator
allows them (`--allow-private-image-urls`); the fetch then connects to the address that
was checked, so a second DNS answer cannot point it elsewhere. Decoding (Pillow) accepts
PNG, JPEG, WebP and GIF (the first frame), refuses images over a pixel limit before
decompressing them, and yields RGB images for the engine.

Bodies are fetched as sent (`Accept-Encoding: identity`; a `Content-Encoding` other
than identity is refused), so that a few hundred bytes of stacked gzip cannot expand
past the size limit before it is checked. Decoding runs in a small pool of its own
(not the default executor, where the GPU probe runs), and the bytes of images being
fetched or decoded, across all requests, are bounded (`ImageLimits.bytes_in_flight`)
and shared fairly between clients (`ByteBudget`, app.services.images.budget): over it a
request gets a 503 `images_busy` (a 429 `image_share_exceeded` over its client's share)
rather than more memory. An address is judged public after unwrapping the IPv4 address
an IPv6 one may carry (IPv4-mapped and -compatible, NAT64, 6to4, Teredo); errors name
the URL's host, never the address it resolved to.

Every failure is an `InvalidRequest` (400) whose `param` names the part, e.g.
`messages[1].content[2].image_url`. Images load concurrently; the first failure cancels
the others, so nothing is left running.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import ssl
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cache
from urllib.parse import urljoin, urlsplit

import httpx
from PIL import Image

from app.config.settings import Settings
from app.errors import InvalidRequest, ServiceUnavailable, TooManyRequests
from app.schemas.chat import Content, ImagePart, Message, TextPart, UserContent
from app.schemas.json import JsonObject
from app.services.images.addresses import is_public
from app.services.images.budget import ByteBudget, Held
from app.services.images.decoding import (
    ImageError,
    ImageRef,
    decode_data_uri,
    decode_image,
    image_refs,
    too_large,
)
from engine.checks import require_image_input, require_ready
from engine.errors import EngineRequestError
from engine.protocol import ImageInput, ModelHost

MAX_REDIRECTS = 3
IN_FLIGHT_IMAGES = 4  # images of the largest size that may be in flight at once
DECODE_WORKERS = 2

# Decoding is CPU work off the event loop, in a pool of its own: a burst of images
# must not delay the GPU probe (default executor) or the request-work pool.
_decode_pool = ThreadPoolExecutor(max_workers=DECODE_WORKERS, thread_name_prefix="lilac-image")

Resolver = Callable[[str, int], Awaitable[list[str]]]


@dataclass(frozen=True, slots=True)
class ImageLimits:
    max_images: int = 8  # per request
    max_bytes: int = 20 * 1024 * 1024  # one image, encoded
    max_pixels: int = 25_000_000  # one image, width x height
    fetch_timeout_s: float = 10.0  # one URL: connect, redirects and body, in all
    allow_private: bool = False  # URLs may reach private, loopback and link-local addresses
    # Encoded bytes of images being fetched or decoded, all requests together.
    bytes_in_flight: int = 4 * 20 * 1024 * 1024

    @classmethod
    def from_settings(cls, settings: Settings) -> ImageLimits:
        return cls(
            max_images=settings.max_images_per_request,
            max_bytes=settings.max_image_bytes,
            max_pixels=settings.max_image_pixels,
            fetch_timeout_s=settings.image_fetch_timeout,
            allow_private=settings.allow_private_image_urls,
            bytes_in_flight=IN_FLIGHT_IMAGES * settings.max_image_bytes,
        )


def template_content(content: Content | UserContent | None) -> str | list[JsonObject]:
    """Message content for chat templates: a string, unless it holds images; then a list
    of `{"type": "text", "text"}` and `{"type": "image"}` parts in their order (the shape
    Hugging Face chat templates of vision models expect)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not any(isinstance(part, ImagePart) for part in content):
        return "\n".join(part.text for part in content if isinstance(part, TextPart))
    return [
        {"type": "image"} if isinstance(part, ImagePart) else {"type": "text", "text": part.text}
        for part in content
    ]


class ImageLoader:
    def __init__(
        self,
        limits: ImageLimits | None = None,
        *,
        resolver: Resolver | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.limits = limits or ImageLimits()
        self._resolve = resolver or _resolve
        self._transport = transport
        self.budget = ByteBudget(
            max(self.limits.bytes_in_flight, self.limits.max_bytes), reserve=self.limits.max_bytes
        )

    async def load(
        self, messages: Sequence[Message], engine: ModelHost, client: str | None = None
    ) -> list[ImageInput]:
        """The request's images in order; [] without image parts. Checks that the model
        takes images, and the count, before fetching or decoding anything. `client`'s
        images count against its share of the byte budget."""
        refs = image_refs(messages)
        if not refs:
            return []
        require_ready(engine)
        try:  # before any fetch: the engine's own decision, with the part that broke it
            require_image_input(engine.model, refs[0].param, f" ({refs[0].param} is an image)")
        except EngineRequestError as exc:
            raise InvalidRequest(exc.message, param=exc.param, code=exc.code) from None
        if len(refs) > self.limits.max_images:
            extra = refs[self.limits.max_images]
            raise InvalidRequest(
                f"At most {self.limits.max_images} images are allowed per request; "
                f"this one has {len(refs)}.",
                param=extra.param,
                code="too_many_images",
            )
        # What can be checked without I/O is checked first, in order: a malformed part
        # fails the request before any fetch starts.
        sources = [self._source(ref) for ref in refs]
        try:
            async with asyncio.TaskGroup() as group:
                tasks = [
                    group.create_task(self.load_one(ref, source, client))
                    for ref, source in zip(refs, sources, strict=True)
                ]
        except* (ImageError, ServiceUnavailable, TooManyRequests) as failures:
            # The first failure cancels the rest; of failures at once, the earliest part
            # (an image's own fault before the server being busy).
            errors = [e for e in failures.exceptions if isinstance(e, ImageError)]
            if errors:
                raise min(errors, key=lambda e: e.position) from None
            raise failures.exceptions[0] from None
        return [
            ImageInput(task.result(), ref.detail) for task, ref in zip(tasks, refs, strict=True)
        ]

    def _source(self, ref: ImageRef) -> bytes | str:
        """A data URI's bytes, or the http(s) URL to fetch."""
        scheme = urlsplit(ref.url).scheme.lower() if ":" in ref.url else ""
        if scheme == "data":
            return decode_data_uri(ref, self.limits.max_bytes)
        if scheme in ("http", "https"):
            return ref.url
        raise ImageError(
            ref,
            "the image URL must be an http(s) URL or a base64 `data:image/...` URI.",
            "invalid_image_url",
        )

    async def load_one(
        self, ref: ImageRef, source: bytes | str, client: str | None = None
    ) -> Image.Image:
        held = Held(self.budget, client)
        try:
            if isinstance(source, bytes):
                held.take(len(source))
                data = source
            else:
                data = await self.fetch(ref, held)
            # Decoding is CPU work: off the event loop. Bounded by the pixel limit.
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(
                _decode_pool, decode_image, ref, data, self.limits.max_pixels
            )
        finally:
            held.give_all()

    async def fetch(self, ref: ImageRef, held: Held | None = None) -> bytes:
        held = held or Held(ByteBudget(self.limits.max_bytes))
        limits = self.limits
        try:
            async with (
                asyncio.timeout(limits.fetch_timeout_s),
                httpx.AsyncClient(
                    transport=self._transport,
                    verify=_ssl_context(),
                    trust_env=False,  # a proxy would bypass the address check
                    follow_redirects=False,
                    timeout=limits.fetch_timeout_s,
                ) as client,
            ):
                url = ref.url
                for _ in range(MAX_REDIRECTS + 1):
                    request = await self._request(client, ref, url)
                    response = await client.send(request, stream=True)
                    try:
                        if response.is_redirect and "location" in response.headers:
                            url = urljoin(url, response.headers["location"])
                            continue
                        return await self._body(ref, response, held)
                    finally:
                        await response.aclose()
                raise ImageError(ref, f"more than {MAX_REDIRECTS} redirects.", "image_fetch_failed")
        except TimeoutError:
            raise ImageError(
                ref,
                f"the image could not be fetched within {limits.fetch_timeout_s:g} s.",
                "image_fetch_timeout",
            ) from None
        except (httpx.HTTPError, OSError) as exc:
            raise ImageError(
                ref, f"the image could not be fetched: {_describe(exc)}", "image_fetch_failed"
            ) from None

    async def _request(self, client: httpx.AsyncClient, ref: ImageRef, url: str) -> httpx.Request:
        """A request to the checked address of `url`'s host (Host header and TLS name kept)."""
        try:
            parsed = httpx.URL(url)
        except httpx.InvalidURL as exc:
            raise ImageError(ref, f"invalid image URL: {exc}", "invalid_image_url") from None
        if parsed.scheme not in ("http", "https") or not parsed.host:
            raise ImageError(ref, f"invalid image URL `{url}`.", "invalid_image_url")
        host = parsed.host
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
        try:
            addresses = [ipaddress.ip_address(host)]
        except ValueError:
            try:
                addresses = [ipaddress.ip_address(a) for a in await self._resolve(host, port)]
            except (OSError, ValueError) as exc:
                raise ImageError(
                    ref, f"the host `{host}` could not be resolved ({exc}).", "image_fetch_failed"
                ) from None
        if not addresses:
            raise ImageError(ref, f"the host `{host}` has no address.", "image_fetch_failed")
        if not self.limits.allow_private:
            for address in addresses:
                if not is_public(address):
                    # The host, not the address: the address would tell a client what
                    # the server's network resolves internally.
                    raise ImageError(
                        ref,
                        f"the image URL's host `{host}` is not a public address; the server "
                        "does not fetch from private, loopback, link-local or reserved "
                        "addresses.",
                        "image_url_not_allowed",
                    )
        address = addresses[0]
        ip_host = f"[{address}]" if address.version == 6 else str(address)
        headers = {
            "Host": parsed.netloc.decode("ascii"),
            "Accept": "image/*",
            # The body as sent: a compressed one could expand past the size limit.
            "Accept-Encoding": "identity",
        }
        extensions = {"sni_hostname": host} if parsed.scheme == "https" else {}
        return client.build_request(
            "GET",
            parsed.copy_with(host=ip_host.strip("[]")),
            headers=headers,
            extensions=extensions,
        )

    async def _body(self, ref: ImageRef, response: httpx.Response, held: Held) -> bytes:
        limit = self.limits.max_bytes
        if response.status_code != 200:
            raise ImageError(
                ref,
                f"fetching the image returned HTTP {response.status_code}.",
                "image_fetch_failed",
            )
        encoding = response.headers.get("content-encoding", "identity").strip().lower()
        if encoding not in ("", "identity"):
            raise ImageError(
                ref,
                f"the image was sent with `Content-Encoding: {encoding[:40]}`; only "
                "unencoded bodies are accepted.",
                "image_fetch_failed",
            )
        declared = response.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise too_large(ref, limit)
        body = bytearray()
        # Raw bytes: httpx would otherwise decode any Content-Encoding on the way.
        async for chunk in response.aiter_raw():
            if len(body) + len(chunk) > limit:
                raise too_large(ref, limit)
            held.take(len(chunk))
            body += chunk
        return bytes(body)


async def _resolve(host: str, port: int) -> list[str]:
    infos = await asyncio.get_running_loop().getaddrinfo(
        host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
    )
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


@cache
def _ssl_context() -> ssl.SSLContext:
    return ssl.create_default_context()


def _describe(exc: Exception) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
