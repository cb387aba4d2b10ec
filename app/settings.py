"""One typed settings object, from command-line flags, environment variables, an optional
TOML file and defaults.

Every flag `--some-flag` can also be set as `LILAC_SOME_FLAG`; a flag given on
the command line wins over the environment. The admission settings may also come
from the `[admission]` table of the `--config` TOML file (`some_flag = ...`), below both.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path

import msgspec


class Settings(msgspec.Struct, kw_only=True, frozen=True):
    model: str | None = None  # None: the default model, prepared on first use
    served_model_name: tuple[str, ...] = ()
    host: str = "127.0.0.1"
    port: int = 8000
    max_model_len: int | None = None
    dtype: str | None = None  # None: float32 on CPU, auto on GPU
    enforce_eager: bool | None = None  # None: on for CPU, off for GPU
    tensor_parallel_size: int = 1
    gpu_memory_utilization: float = 0.9
    cpu_kvcache_space_gib: int = 2
    chat_template: str | None = None
    tool_call_parser: str | None = None
    family: str | None = None  # None: detected from the model
    seed: int = 0
    log_level: str = "info"
    config: str | None = None  # TOML file; its [admission] table holds admission settings
    # Admission: lending the GPU while its owner does not need it (engine.admission).
    gpu_probe: str | None = None  # None: nvml where there is a GPU, none elsewhere
    probe_interval: float = 1.0
    owner_busy_util: float = 20.0
    owner_light_util: float = 5.0
    owner_busy_memory_mib: float = 1024.0
    lending_windows: str | None = None
    lending_timezone: str = "UTC"
    grace_period: float = 30.0
    resume_after: float = 60.0
    max_concurrent: int = 16
    throttled_concurrent: int = 2
    max_queued: int = 64
    max_queued_per_client: int = 16
    queue_timeout: float = 30.0
    kv_budget_tokens: int = 0
    release_memory: bool = True
    admin_key: str | None = None
    # Image input (app.services.images).
    allow_private_image_urls: bool = False
    max_images_per_request: int = 8
    max_image_bytes: int = 20 * 1024 * 1024
    max_image_pixels: int = 25_000_000
    image_fetch_timeout: float = 10.0

    @property
    def on_gpu(self) -> bool:
        return has_nvidia_gpu()


def has_nvidia_gpu() -> bool:
    return Path("/dev/nvidia0").exists() or shutil.which("nvidia-smi") is not None


def _bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off"}:
        return False
    raise argparse.ArgumentTypeError(f"expected a boolean, got {text!r}")


# (flag, type, help). The environment variable is LILAC_ + the flag in capitals.
_FLAGS: list[tuple[str, type | object, str]] = [
    (
        "model",
        str,
        "model to serve: a local checkpoint folder or a Hugging Face id "
        "(default: SmolLM2-135M-Instruct, prepared on first use)",
    ),
    (
        "served-model-name",
        str,
        "name(s) clients use in `model`, comma-separated (default: the model's id)",
    ),
    ("host", str, "address to listen on (default 127.0.0.1)"),
    ("port", int, "port to listen on (default 8000)"),
    ("max-model-len", int, "context length (default: the model's)"),
    (
        "dtype",
        str,
        "weights and activations dtype: auto, float32, bfloat16, float16 "
        "(default: float32 on CPU, auto on GPU)",
    ),
    ("enforce-eager", _bool, "disable CUDA graphs / torch.compile (default: true on CPU)"),
    ("tensor-parallel-size", int, "GPUs to shard the model over (default 1)"),
    ("gpu-memory-utilization", float, "fraction of accelerator memory vLLM may use (default 0.9)"),
    ("cpu-kvcache-space-gib", int, "KV cache size on CPU, GiB (default 2)"),
    (
        "tool-call-parser",
        str,
        "vLLM tool-parser name of the model's call format: hermes, "
        "kimi_k2, glm47, minimax_m3, gemma4, ... (default: the family's)",
    ),
    ("chat-template", str, "Jinja chat-template file overriding the model's"),
    (
        "family",
        str,
        "model family (template, thinking toggle, reasoning parser): smollm2, kimi_k2, "
        "glm45, gemma4, minimax_m3 (default: detected from the model)",
    ),
    ("seed", int, "engine random seed (default 0)"),
    ("log-level", str, "debug, info, warning or error (default info)"),
    ("config", str, "TOML file whose [admission] table sets the admission flags below"),
    (
        "allow-private-image-urls",
        _bool,
        "let image URLs reach private, loopback and link-local addresses (default: refused)",
    ),
    ("max-images-per-request", int, "images one chat request may carry (default 8)"),
    ("max-image-bytes", int, "size limit of one image, encoded, in bytes (default 20 MiB)"),
    ("max-image-pixels", int, "width x height limit of one image (default 25000000)"),
    ("image-fetch-timeout", float, "seconds to fetch one image URL, in all (default 10)"),
]

# Admission flags: also accepted in the [admission] table of the --config file.
_ADMISSION_FLAGS: list[tuple[str, type | object, str]] = [
    ("gpu-probe", str, "owner-activity probe: nvml, none or scripted:FILE (default: nvml on GPU)"),
    ("probe-interval", float, "seconds between probe samples (default 1)"),
    ("owner-busy-util", float, "foreign GPU utilization %% meaning the owner is back (default 20)"),
    ("owner-light-util", float, "foreign GPU utilization %% that throttles (default 5)"),
    ("owner-busy-memory-mib", float, "foreign GPU memory meaning the owner is back (default 1024)"),
    (
        "lending-windows",
        str,
        "when lending is allowed, e.g. 'mon-fri 19:00-07:00,sat-sun 00:00-24:00' (default: any)",
    ),
    ("lending-timezone", str, "time zone of --lending-windows (default UTC)"),
    ("grace-period", float, "seconds in-flight requests may finish after a reclaim (default 30)"),
    ("resume-after", float, "seconds the owner must be idle before serving again (default 60)"),
    ("max-concurrent", int, "requests running at once (default 16)"),
    ("throttled-concurrent", int, "requests running at once while the owner is lightly active (2)"),
    ("max-queued", int, "requests waiting for admission (default 64)"),
    ("max-queued-per-client", int, "queued requests one client may hold; more get 429 (16)"),
    ("queue-timeout", float, "seconds a request may wait in the queue (default 30)"),
    ("kv-budget-tokens", int, "KV tokens admitted requests may claim (0: the engine's; -1: off)"),
    ("release-memory", _bool, "free GPU memory (vLLM sleep mode) while yielded (default true)"),
    ("admin-key", str, "bearer key for /admin routes (without it they answer 403)"),
]
_FLAGS += _ADMISSION_FLAGS


def build_parser(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    for flag, kind, help_text in _FLAGS:
        env_name = "LILAC_" + flag.upper().replace("-", "_")
        # A boolean flag alone means true: `--allow-private-image-urls`.
        extra: dict[str, object] = {"nargs": "?", "const": True} if kind is _bool else {}
        parser.add_argument(
            f"--{flag}", type=kind, default=None, help=f"{help_text} [{env_name}]", **extra
        )
    return parser


def settings_from(
    args: argparse.Namespace | None = None, environ: Mapping[str, str] | None = None
) -> Settings:
    """Merge flags over environment over defaults; validate types once."""
    environ = os.environ if environ is None else environ
    values: dict[str, object] = {}
    for flag, kind, _ in _FLAGS:
        field = flag.replace("-", "_")
        value = getattr(args, field, None) if args is not None else None
        if value is None:
            raw = environ.get("LILAC_" + field.upper())
            if raw is None or raw == "":
                continue
            try:
                value = kind(raw)  # type: ignore[operator]
            except (ValueError, argparse.ArgumentTypeError) as exc:
                raise SystemExit(f"LILAC_{field.upper()}: {exc}") from exc
        values[field] = value
    config = values.get("config")
    if config:
        for field, value in _admission_table(str(config)).items():
            values.setdefault(field, value)
    if isinstance(values.get("served_model_name"), str):
        names = str(values["served_model_name"]).split(",")
        values["served_model_name"] = tuple(n.strip() for n in names if n.strip())
    return msgspec.convert(values, Settings)


def _admission_table(path: str) -> dict[str, object]:
    """The [admission] table of a TOML file, keys checked against the admission flags."""
    try:
        with open(path, "rb") as file:
            table = tomllib.load(file).get("admission", {})
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise SystemExit(f"--config {path}: {exc}") from exc
    known = {flag.replace("-", "_") for flag, _, _ in _ADMISSION_FLAGS}
    fields = {key.replace("-", "_"): value for key, value in table.items()}
    unknown = sorted(set(fields) - known)
    if unknown:
        raise SystemExit(f"--config {path}: unknown [admission] keys: {', '.join(unknown)}")
    return fields


def parse_args(argv: Sequence[str] | None = None) -> Settings:
    parser = build_parser(argparse.ArgumentParser(prog="lilac-serve serve"))
    return settings_from(parser.parse_args(argv))
