"""One typed settings object, from command-line flags, environment variables, an optional
TOML file and defaults.

`Settings` is the one flag table: each field declares, once, its type, its default (the
field's own; the admission controller's come from `engine.admission.policy.Policy`) and,
in its `Flag` annotation, its help text and where it is documented. Everything else is
generated from it: the `--some-flag` option of the command line, the `LILAC_SOME_FLAG`
environment variable, the `some_flag` key of the `--config` TOML file's `[admission]`
table (admission settings only) and the documentation's flag tables
(`markdown_table`, rendered by docs/hooks/generated.py and checked by
tests/unit/app/test_readme_flags.py): that generation lives
in `app.settings_sources`.

A flag given on the command line wins over the environment, which wins over the TOML
file, which wins over the defaults.
"""

from __future__ import annotations

import argparse
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import msgspec

from engine.admission.policy import Policy

ENV_PREFIX = "LILAC_"
SECTIONS = {"server": "server", "admission": "admission controller", "tenants": "tenants"}


@dataclass(frozen=True, slots=True)
class Flag:
    """The documentation of one setting; the setting's type and default are its field's."""

    help: str  # one line, Markdown: the documentation's "meaning" column and `--help`
    section: str = "server"  # the documentation's table the flag is listed in: a key of SECTIONS
    toml: bool = False  # also settable in the [admission] table of --config
    repeatable: bool = False  # may be given more than once on the command line
    # The default as documented, where the value alone does not say it (a None default).
    default_doc: str | None = None
    default_note: str | None = None  # said after the value, e.g. "20 MiB"
    # Reads the flag's text (command line and environment); default: from the field type.
    parse: Callable[[str], object] | None = None


def _bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off"}:
        return False
    raise argparse.ArgumentTypeError(f"expected a boolean, got {text!r}")


def _one(text: str) -> tuple[str, ...]:
    return (text.strip(),) if text.strip() else ()


def _names(text: str) -> tuple[str, ...]:
    return tuple(name.strip() for name in text.split(",") if name.strip())


_POLICY = Policy()  # the admission controller's defaults, declared with its policy
_ADMISSION = {"section": "admission", "toml": True}


class Settings(msgspec.Struct, kw_only=True, frozen=True):
    model: Annotated[
        tuple[str, ...],
        Flag(
            "a local checkpoint folder or a Hugging Face id; repeat it to serve several models",
            # Empty: the default model, prepared on first use.
            default_doc="SmolLM2-135M-Instruct",
            parse=_one,
            repeatable=True,
        ),
    ] = ()
    served_model_name: Annotated[
        tuple[str, ...],
        Flag(
            "name(s) clients put in `model`, comma-separated",
            default_doc="the model's id",
            parse=_names,
        ),
    ] = ()
    host: Annotated[str, Flag("address to listen on")] = "127.0.0.1"
    port: Annotated[int, Flag("port to listen on")] = 8000
    max_model_len: Annotated[
        int | None, Flag("context length in tokens", default_doc="the model's")
    ] = None
    dtype: Annotated[
        str | None,
        Flag(
            "weights and activations dtype: `auto`, `float32`, `bfloat16`, `float16`",
            default_doc="`float32` on CPU, `auto` on GPU",
        ),
    ] = None
    enforce_eager: Annotated[
        bool | None,
        Flag("skip torch.compile and CUDA graphs", default_doc="`true` on CPU, `false` on GPU"),
    ] = None
    tensor_parallel_size: Annotated[int, Flag("GPUs to shard the model over")] = 1
    pipeline_parallel_size: Annotated[
        int, Flag("pipeline stages: the model's layers split over GPUs or nodes")
    ] = 1
    data_parallel_size: Annotated[int, Flag("engine replicas inside this server")] = 1
    distributed_executor_backend: Annotated[
        str | None,
        Flag("`mp` (one node) or `ray` (several nodes)", default_doc="vLLM's choice"),
    ] = None
    gpu_memory_utilization: Annotated[float, Flag("fraction of GPU memory vLLM may take")] = 0.9
    cpu_kvcache_space_gib: Annotated[
        int | None,
        Flag(
            "KV cache size on CPU (sets `VLLM_CPU_KVCACHE_SPACE`)",
            default_doc="`VLLM_CPU_KVCACHE_SPACE` if set, else half the memory available "
            "after the weights and a margin of max(2 GiB, 10%), 1 to 64 GiB",
        ),
    ] = None
    max_num_batched_tokens: Annotated[
        int | None,
        Flag(
            "most tokens one engine step schedules (prefill chunks and decodes)",
            default_doc="vLLM's (2048 on CPU)",
        ),
    ] = None
    max_num_seqs: Annotated[
        int | None,
        Flag("most sequences one engine step runs", default_doc="vLLM's (128 on CPU)"),
    ] = None
    memory_budget_gib: Annotated[
        float | None,
        Flag(
            "GiB the awake models' `memory_gib` may add up to; a wake beyond it sleeps the "
            "least recently used idle model first",
            default_doc="none (no budget)",
        ),
    ] = None
    max_wakes_per_minute: Annotated[
        int,
        Flag(
            "wakes of sleeping models one client (with `--auth keys`: one key) may start "
            "per minute; over it, 429 `wake_limit_exceeded`; `0`: no limit"
        ),
    ] = 6
    prefer_awake_elsewhere: Annotated[
        bool,
        Flag(
            "in a fleet behind a router that retries a 429 on another box (vLLM's router, "
            "sglang-router): the first attempt of a request at a model asleep here gets 429 "
            "`model_asleep_here`, so the router tries a box where the model is awake; the "
            "same request again within 30 s (the router found none) wakes it here"
        ),
    ] = False
    tool_call_parser: Annotated[
        str | None,
        Flag(
            "tool-call format and parser, by `vllm serve`'s names",
            default_doc="the family's (`hermes`)",
        ),
    ] = None
    grammar_compile_timeout: Annotated[
        float,
        Flag(
            "seconds of CPU a new grammar (`response_format`, tools, regex) may take to "
            "compile; over it, 400 `grammar_too_complex`; `0`: no limit (a family's tool-call "
            "grammar takes under 0.1 s once the bounded strings are compiled at start, a "
            "schema of 800 optional properties 1.5 s)"
        ),
    ] = 5.0
    chat_template: Annotated[
        str | None,
        Flag(
            "Jinja file (or a name in `templates/`) overriding the model's chat template",
            default_doc="the family's, else the tokenizer's",
        ),
    ] = None
    family: Annotated[
        str | None,
        Flag(
            "model family: `smollm2`, `kimi_k2`, `glm45`, `gemma4`, `minimax_m3`",
            default_doc="detected from the model",
        ),
    ] = None
    seed: Annotated[int, Flag("engine random seed")] = 0
    log_level: Annotated[str, Flag("`debug`, `info`, `warning`, `error`")] = "info"
    log_format: Annotated[
        str, Flag("`text` or `json` (one object a line); an access line per request either way")
    ] = "text"
    otlp_traces_endpoint: Annotated[
        str | None,
        Flag(
            "OpenTelemetry collector for vLLM's request spans, e.g. `http://collector:4317`",
            default_doc="none",
        ),
    ] = None
    # Image input (app.services.images).
    allowed_origins: Annotated[
        tuple[str, ...],
        Flag(
            "web origins whose pages may call the API (CORS), comma-separated; `*` any",
            default_doc="none (no cross-origin access)",
            parse=_names,
        ),
    ] = ()
    allow_private_image_urls: Annotated[
        bool,
        Flag("let image URLs reach private, loopback, link-local and other non-public addresses"),
    ] = False
    max_images_per_request: Annotated[int, Flag("images one chat request may carry")] = 8
    max_image_bytes: Annotated[
        int,
        Flag("size of one image, encoded (downloaded or base64-decoded)", default_note="20 MiB"),
    ] = 20 * 1024 * 1024
    max_image_pixels: Annotated[
        int, Flag("width × height of one image, checked on its header before decoding")  # noqa: RUF001
    ] = 25_000_000
    image_fetch_timeout: Annotated[
        float,
        Flag("seconds to fetch one image URL: resolving, connecting, redirects and body"),
    ] = 10.0
    # Files (app.routes.files).
    max_file_bytes: Annotated[
        int,
        Flag(
            "size of one uploaded file (`POST /v1/files`); a larger upload is refused "
            "(413) as it streams in",
            default_note="100 MB",
        ),
    ] = 100_000_000
    max_file_lines: Annotated[
        int,
        Flag("lines of one uploaded file (a batch's requests); more is refused (400)"),
    ] = 50_000
    # Admission: lending the GPU while its owner does not need it (engine.admission).
    gpu_probe: Annotated[
        str | None,
        Flag(
            "`nvml`, `none` or `scripted:FILE`",
            default_doc="`nvml` on GPU, else `none`",
            **_ADMISSION,
        ),
    ] = None
    probe_interval: Annotated[float, Flag("seconds between samples", **_ADMISSION)] = (
        _POLICY.probe_interval_s
    )
    owner_busy_util: Annotated[
        float, Flag("foreign GPU utilization (%) meaning the owner is back", **_ADMISSION)
    ] = _POLICY.busy_util_pct
    owner_light_util: Annotated[
        float, Flag("foreign utilization (%) that throttles", **_ADMISSION)
    ] = _POLICY.light_util_pct
    owner_busy_memory_mib: Annotated[
        float, Flag("foreign GPU memory meaning the owner is back", **_ADMISSION)
    ] = _POLICY.busy_memory_mib
    lending_windows: Annotated[
        str | None,
        Flag(
            "e.g. `mon-fri 19:00-07:00, sat+sun 00:00-24:00`",
            default_doc="always",
            **_ADMISSION,
        ),
    ] = None
    lending_timezone: Annotated[str, Flag("IANA zone of the windows", **_ADMISSION)] = "UTC"
    grace_period: Annotated[
        float, Flag("seconds in-flight requests may finish after a reclaim", **_ADMISSION)
    ] = _POLICY.grace_s
    resume_after: Annotated[
        float, Flag("seconds of owner quiet before serving again", **_ADMISSION)
    ] = _POLICY.resume_after_s
    max_concurrent: Annotated[
        int, Flag("requests running at once, on each model's engine", **_ADMISSION)
    ] = _POLICY.max_concurrent
    throttled_concurrent: Annotated[
        int,
        Flag("the same while the owner is lightly active (all models together)", **_ADMISSION),
    ] = _POLICY.throttled_concurrent
    max_queued: Annotated[
        int,
        Flag(
            "requests waiting in all (shared equally while several clients wait; a quarter "
            "held for clients with nothing queued)",
            **_ADMISSION,
        ),
    ] = _POLICY.max_queued
    queue_timeout: Annotated[float, Flag("seconds a request may wait", **_ADMISSION)] = (
        _POLICY.queue_timeout_s
    )
    max_request_tokens: Annotated[
        int,
        Flag(
            "output tokens one request may ask for: `n` x `max_tokens` over its prompts",
            **_ADMISSION,
        ),
    ] = _POLICY.max_request_tokens
    kv_budget_tokens: Annotated[
        int,
        Flag(
            "KV tokens admitted requests may claim on each model's engine; `0` that engine's "
            "capacity, `-1` no limit",
            **_ADMISSION,
        ),
    ] = _POLICY.kv_budget_tokens
    release_memory: Annotated[
        bool,
        Flag(
            "free GPU memory while yielded (builds the engine with vLLM sleep mode on GPU)",
            **_ADMISSION,
        ),
    ] = _POLICY.release_memory
    admin_key: Annotated[
        str | None,
        Flag(
            "`Authorization: Bearer` key of `/admin/*`; without it they answer 403. Set it "
            "in the environment or use `--admin-key-file`: a flag shows in `ps`",
            default_doc="none",
            **_ADMISSION,
        ),
    ] = None
    admin_key_file: Annotated[
        str | None,
        Flag(
            "file holding the admin key (its first line), instead of `LILAC_ADMIN_KEY`",
            default_doc="none",
            **_ADMISSION,
        ),
    ] = None
    # Tenants: API keys, limits and usage (app.tenancy).
    auth: Annotated[
        str | None,
        Flag(
            "`none`, `static` (the `--api-key`s) or `keys` (the keys database)",
            section="tenants",
            default_doc="`none` on a loopback address; `static` with `--api-key`",
        ),
    ] = None
    api_key: Annotated[
        tuple[str, ...],
        Flag(
            "a key of `--auth static`; repeatable, or comma-separated",
            section="tenants",
            default_doc="none",
            parse=_names,
            repeatable=True,
        ),
    ] = ()
    api_key_file: Annotated[
        str | None,
        Flag("a file of `--auth static` keys, one a line", section="tenants", default_doc="none"),
    ] = None
    database_url: Annotated[
        str | None,
        Flag(
            "keys and usage database: `sqlite:///PATH` or `postgresql://...`",
            section="tenants",
            default_doc="`sqlite:///` `lilac.db` in `--data-dir`",
        ),
    ] = None
    data_dir: Annotated[
        str,
        Flag(
            "where the server keeps its SQLite database, usage spool and the secret that "
            "seals reasoning for Responses clients (created on first use)",
            section="tenants",
        ),
    ] = "~/.local/share/lilac-serve"
    key_cache_outage_s: Annotated[
        float,
        Flag(
            "seconds a key the database confirmed keeps working from the cache while the "
            "database is unreachable; past it, and for a key not seen before, 503 "
            "`key_store_unavailable`",
            section="tenants",
        ),
    ] = 300.0
    limit_sync_interval_s: Annotated[
        float,
        Flag(
            "with `--auth keys` on PostgreSQL: seconds between a replica's rounds with the "
            "database that keep each key's limits fleet-wide (its slices of each key's "
            "requests, tokens and concurrency topped up or given back, its heartbeat "
            "renewed); a request short of its slice starts a round at once",
            section="tenants",
        ),
    ] = 0.5
    response_retention_days: Annotated[
        float,
        Flag(
            "days a stored response (`store: true`) is kept, then deleted; until then only "
            "the key that made it reads it",
            section="tenants",
        ),
    ] = 30.0
    max_stored_response_bytes: Annotated[
        int,
        Flag(
            "bytes one stored response may take (its body, input and output items); a "
            "larger one is a 400 `stored_response_too_large`",
            section="tenants",
            default_note="16 MiB",
        ),
    ] = 16 * 1024 * 1024
    max_response_chain: Annotated[
        int,
        Flag(
            "responses one `previous_response_id` chain may hold, the new one included; a "
            "longer one is a 400 `response_chain_too_long`",
            section="tenants",
        ),
    ] = 100
    max_response_chain_bytes: Annotated[
        int,
        Flag(
            "bytes of the stored input and output items one chain may carry; more is a 400 "
            "`response_chain_too_long`",
            section="tenants",
            default_note="32 MiB",
        ),
    ] = 32 * 1024 * 1024
    batch_concurrency: Annotated[
        int,
        Flag(
            "batch lines one replica runs at once, at most (they also run only in "
            "capacity no interactive request is waiting for)",
            section="tenants",
        ),
    ] = 32
    batch_concurrency_beside_interactive: Annotated[
        int,
        Flag(
            "batch lines one replica keeps running while interactive requests run (the "
            "newest over this are cut when one arrives, and run again later): every line "
            "in the engine's batch slows each step of an interactive request",
            section="tenants",
        ),
    ] = 0
    batch_resume_after_s: Annotated[
        float,
        Flag(
            "seconds without an interactive request before batch lines start again beyond "
            "`--batch-concurrency-beside-interactive` (so gaps in a steady load do not let "
            "lines in and out)",
            section="tenants",
        ),
    ] = 2.0
    batch_prefill_lines: Annotated[
        int,
        Flag(
            "batch lines one replica lets wait for their first token at once (0: no "
            "bound): lines enter the engine a few at a time, the next as these are "
            "prefilled, so a batch starting or resuming never makes one long prefill step "
            "an interactive request arriving has to wait out",
            section="tenants",
        ),
    ] = 4
    batch_lease_s: Annotated[
        float,
        Flag(
            "seconds a replica's claim on a running batch line lasts unrenewed: a line "
            "of a replica that died runs again on another after this",
            section="tenants",
        ),
    ] = 60.0
    replica_id: Annotated[
        str | None,
        Flag(
            "this replica's name in batch line claims (replicas sharing a database need "
            "distinct names)",
            section="tenants",
            default_doc="host name and process id",
        ),
    ] = None
    config: Annotated[
        str | None,
        Flag(
            "TOML file; its `[admission]` table sets any flag above (below env and flags), "
            "its `[[models]]` tables declare the served models",
            section="admission",
            default_doc="none",
        ),
    ] = None

    @property
    def on_gpu(self) -> bool:
        return has_nvidia_gpu()

    def resolved_admin_key(self) -> str | None:
        """The admin key: `admin_key`, else the first line of `admin_key_file`."""
        if self.admin_key:
            return self.admin_key
        if not self.admin_key_file:
            return None
        try:
            with open(self.admin_key_file, encoding="utf-8") as file:
                key = file.readline().strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise SystemExit(f"--admin-key-file {self.admin_key_file}: {exc}") from exc
        if not key:
            raise SystemExit(f"--admin-key-file {self.admin_key_file}: the file is empty")
        return key


def has_nvidia_gpu() -> bool:
    return Path("/dev/nvidia0").exists() or shutil.which("nvidia-smi") is not None
