"""The image-input settings: flags, environment, and the loader limits built from them."""

from __future__ import annotations

from app.config.sources import parse_args, settings_from
from app.services.images.service import ImageLimits


def test_defaults() -> None:
    limits = ImageLimits.from_settings(settings_from(None, {}))
    assert limits == ImageLimits(
        max_images=8,
        max_bytes=20 * 1024 * 1024,
        max_pixels=25_000_000,
        fetch_timeout_s=10.0,
        allow_private=False,
    )


def test_flags() -> None:
    settings = parse_args(
        [
            "--allow-private-image-urls",
            "--max-images-per-request",
            "2",
            "--max-image-bytes",
            "1000",
            "--max-image-pixels",
            "4096",
            "--image-fetch-timeout",
            "0.5",
        ]
    )
    assert ImageLimits.from_settings(settings) == ImageLimits(2, 1000, 4096, 0.5, True, 4000)


def test_boolean_flag_takes_an_explicit_value_too() -> None:
    assert parse_args(["--allow-private-image-urls", "false"]).allow_private_image_urls is False
    assert parse_args(["--enforce-eager", "true"]).enforce_eager is True
    assert parse_args(["--enforce-eager"]).enforce_eager is True


def test_environment() -> None:
    environ = {"LILAC_ALLOW_PRIVATE_IMAGE_URLS": "1", "LILAC_MAX_IMAGES_PER_REQUEST": "3"}
    settings = settings_from(None, environ)
    assert settings.allow_private_image_urls is True
    assert settings.max_images_per_request == 3
