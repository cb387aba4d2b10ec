"""Test images in every accepted format, and a local HTTP server that serves them."""

from __future__ import annotations

import base64
import io
import struct
import threading
import time
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from PIL import Image


def encode(image: Image.Image, fmt: str, **options: object) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format=fmt, **options)
    return buffer.getvalue()


def png(size: tuple[int, int] = (32, 24), color: str = "red") -> bytes:
    return encode(Image.new("RGB", size, color), "PNG")


def gif_two_frames() -> bytes:
    """An animated GIF whose first frame is red and second blue."""
    frames = [Image.new("RGB", (16, 16), c) for c in ("red", "blue")]
    return encode(frames[0], "GIF", save_all=True, append_images=frames[1:], duration=100)


def data_uri(data: bytes, media_type: str = "image/png") -> str:
    return f"data:{media_type};base64,{base64.b64encode(data).decode()}"


def png_header_only(width: int, height: int) -> bytes:
    """A PNG that claims `width` x `height` in its header and holds no pixels: a
    decompression bomb is refused on this header, before any decoding."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        crc = zlib.crc32(kind + body) & 0xFFFFFFFF
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", crc)

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IEND", b"")


@dataclass
class Route:
    body: bytes = b""
    status: int = 200
    content_type: str = "image/png"
    delay_s: float = 0.0  # before the headers
    location: str | None = None  # a redirect
    chunked: bool = False  # no Content-Length
    encoding: str | None = None  # a Content-Encoding header (the body is sent as given)


@dataclass
class ImageServer:
    """A threaded HTTP server on 127.0.0.1 with a route table; records what it served."""

    routes: dict[str, Route] = field(default_factory=dict)
    hits: list[tuple[str, str]] = field(default_factory=list)  # (path, Host header)
    accept_encodings: list[str | None] = field(default_factory=list)  # of each request
    port: int = 0

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"


@contextmanager
def image_server(routes: dict[str, Route] | None = None) -> Iterator[ImageServer]:
    state = ImageServer(routes=dict(routes or {}))

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            state.hits.append((self.path, self.headers.get("Host", "")))
            state.accept_encodings.append(self.headers.get("Accept-Encoding"))
            route = state.routes.get(self.path)
            if route is None:
                route = Route(b"not found", status=404, content_type="text/plain")
            if route.delay_s:
                time.sleep(route.delay_s)
            try:
                self.send_response(route.status)
                self.send_header("Content-Type", route.content_type)
                if route.encoding is not None:
                    self.send_header("Content-Encoding", route.encoding)
                if route.location is not None:
                    self.send_header("Location", route.location)
                if route.chunked:
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    for start in range(0, len(route.body), 4096):
                        piece = route.body[start : start + 4096]
                        self.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
                    self.wfile.write(b"0\r\n\r\n")
                else:
                    self.send_header("Content-Length", str(len(route.body)))
                    self.end_headers()
                    self.wfile.write(route.body)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (a timeout or size test)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    state.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
