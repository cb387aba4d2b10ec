"""The image parts of a chat request and their bytes: where each part stands (for the
template and for errors), base64 `data:` URIs, and decoding with Pillow (PNG, JPEG,
WebP and GIF's first frame) to RGB, the pixel limit checked on the header before any
pixel is decompressed. Fetching URLs and the budgets around it are `app.services.images.service`'.
"""

from __future__ import annotations

import base64
import binascii
import io
from collections.abc import Sequence
from dataclasses import dataclass

from PIL import Image, UnidentifiedImageError

from app.errors import InvalidRequest
from app.schemas.chat import ImagePart, Message

FORMATS = ("PNG", "JPEG", "WEBP", "GIF")
_WHITESPACE = b" \t\n\r\x0b\x0c"


@dataclass(frozen=True, slots=True)
class ImageRef:
    """Where an image part stands: message and part index, for the template and errors."""

    message: int
    part: int
    url: str
    detail: str

    @property
    def param(self) -> str:
        return f"messages[{self.message}].content[{self.part}].image_url"


class ImageError(InvalidRequest):
    """A 400 about one image part; `position` orders failures of one request."""

    def __init__(self, ref: ImageRef, message: str, code: str) -> None:
        super().__init__(f"{ref.param}: {message}", param=ref.param, code=code)
        self.position = (ref.message, ref.part)


def image_refs(messages: Sequence[Message]) -> list[ImageRef]:
    refs = []
    for m, message in enumerate(messages):
        content = getattr(message, "content", None)
        if isinstance(content, list):
            for p, part in enumerate(content):
                if isinstance(part, ImagePart):
                    refs.append(ImageRef(m, p, part.image_url.url, part.image_url.detail))
    return refs


def decode_data_uri(ref: ImageRef, max_bytes: int) -> bytes:
    header, comma, payload = ref.url[len("data:") :].partition(",")
    if not comma:
        raise ImageError(ref, "malformed data URI (no comma).", "invalid_image_url")
    media_type, *params = [item.strip().lower() for item in header.split(";")]
    if "base64" not in params:
        raise ImageError(ref, "data URIs must be base64-encoded (`;base64,`).", "invalid_image_url")
    if media_type and not media_type.startswith("image/"):
        raise ImageError(
            ref, f"the data URI's media type `{media_type}` is not an image.", "invalid_image"
        )
    try:
        # Line breaks some encoders insert go first, in one pass at memory speed: a split
        # builds a string per line, several times slower, all in one call that holds
        # the GIL (tens of milliseconds for a 10 MB body).
        encoded = payload.encode("ascii").translate(None, _WHITESPACE)
    except UnicodeEncodeError:
        raise ImageError(ref, "the data URI is not valid base64.", "invalid_image") from None
    if len(encoded) // 4 * 3 > max_bytes + 2:
        raise too_large(ref, max_bytes)
    try:
        data = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        raise ImageError(ref, "the data URI is not valid base64.", "invalid_image") from None
    if len(data) > max_bytes:
        raise too_large(ref, max_bytes)
    return data


def decode_image(ref: ImageRef, data: bytes, max_pixels: int) -> Image.Image:
    """Bytes -> an RGB image. The pixel limit is checked on the header, before decoding."""
    try:
        # Opening reads the header only. Pillow's own bomb check (Image.MAX_IMAGE_PIXELS)
        # raises for a header over twice its limit; ours is usually lower and checked here.
        image = Image.open(io.BytesIO(data), formats=FORMATS)
        width, height = image.size
        if width * height > max_pixels:
            raise _too_many_pixels(ref, width, height, max_pixels)
        image.seek(0)  # animated GIF/WebP: the first frame
        image.load()
    except Image.DecompressionBombError:
        raise ImageError(
            ref, f"the image has more than {max_pixels} pixels.", "image_too_large"
        ) from None
    except UnidentifiedImageError:
        raise ImageError(
            ref,
            "the data is not an image in a supported format (PNG, JPEG, WebP, GIF).",
            "invalid_image",
        ) from None
    except (OSError, SyntaxError, ValueError, EOFError) as exc:
        raise ImageError(ref, f"the image could not be decoded ({exc}).", "invalid_image") from None
    return _rgb(image)


def _rgb(image: Image.Image) -> Image.Image:
    if image.mode == "RGB":
        return image
    if image.mode == "P":
        image = image.convert("RGBA")
    if image.mode in ("RGBA", "LA", "PA"):
        # Transparent pixels over white, not over whatever colour they hide.
        rgba = image.convert("RGBA")
        canvas = Image.new("RGB", rgba.size, (255, 255, 255))
        canvas.paste(rgba, mask=rgba.getchannel("A"))
        return canvas
    return image.convert("RGB")


def too_large(ref: ImageRef, limit: int) -> ImageError:
    return ImageError(ref, f"the image is larger than {limit} bytes.", "image_too_large")


def _too_many_pixels(ref: ImageRef, width: int, height: int, limit: int) -> ImageError:
    return ImageError(
        ref,
        f"the image is {width}x{height} pixels, over the limit of {limit} pixels.",
        "image_too_large",
    )
