"""The server's flags (the documentation's "server" table): the models and how vLLM runs
them, the warm pool, tool calls and templates, logging, cross-origin access, and the
limits on images, uploaded files and request bodies.

A field's type and default are the setting's; its `Flag` says the rest (see
`app.config.settings` for how the groups stack into one `Settings`).
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from app.config.flag import Flag, comma_names, one_name, parse_auto_bool


class ServerFlags(msgspec.Struct, kw_only=True, frozen=True):
    model: Annotated[
        tuple[str, ...],
        Flag(
            "a local checkpoint folder or a Hugging Face id; repeat it to serve several models",
            # Empty: the default model, prepared on first use.
            default_doc="SmolLM2-135M-Instruct",
            parse=one_name,
            repeatable=True,
        ),
    ] = ()
    served_model_name: Annotated[
        tuple[str, ...],
        Flag(
            "name(s) clients put in `model`, comma-separated",
            default_doc="the model's id",
            parse=comma_names,
        ),
    ] = ()
    host: Annotated[str, Flag("address to listen on")] = "127.0.0.1"
    port: Annotated[int, Flag("port to listen on")] = 8000
    api_server_count: Annotated[
        int,
        Flag(
            "frontend processes sharing one engine core, as `vllm serve`'s: each answers "
            "HTTP, and vLLM's output processing is spread over them (for a GPU that makes "
            "more tokens than one core can frame). Over 1: admission's budgets and the "
            "KV cache are split between them, key limits hold across them through a "
            "PostgreSQL keys database (so `--auth keys` needs a PostgreSQL "
            "`--database-url`), and several models, `keep_alive`, `--memory-budget-gib`, "
            "a GPU probe other than `none`, `--lending-windows` and `--data-parallel-size` "
            "over 1 are refused at start; SIGTERM drains every process; `/metrics` answers "
            "for the process that serves the scrape (docs: Frontend capacity)"
        ),
    ] = 1
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
            default_doc="512 on CPU (steps of about a second on two cores), vLLM's on GPU",
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
    fleet_models_heartbeat_s: Annotated[
        float,
        Flag(
            "with `--auth keys`: seconds between this replica's heartbeats in the keys "
            "database, where the replicas sharing it publish the models they serve; "
            "`GET /v1/models` then lists the fleet's models, and a request for a model "
            "only another live replica serves gets 429 `model_not_here` (a router "
            "retries it there). A replica's models drop out 3 heartbeats after its last; "
            "`0`: off (each replica lists and serves only its own)"
        ),
    ] = 2.0
    engine_frontend_process: Annotated[
        Literal["auto", "true", "false"],
        Flag(
            "run the engine's frontend (chat templates, tokenization, vLLM's output "
            "handling, detokenization, stop strings, reasoning and tool-call parsing) in a "
            "process of its own beside the HTTP process, which then receives finished "
            "deltas, one frame per engine step: less CPU per token in the HTTP process. "
            "`auto`: on where it applies (one model, `--api-server-count` 1), off "
            "otherwise; `true`: on, and several models or `--api-server-count` over 1 are "
            "refused at start; `false`: off. With it on, a sleeping model wakes before the "
            "engine's checks run, and `/metrics` reads the `vllm:` series from that "
            "process at each scrape (docs: Frontend capacity)",
            parse=parse_auto_bool,
        ),
    ] = "auto"
    fair_share: Annotated[
        bool,
        Flag(
            "share the engine fairly between clients (keys): its waiting requests run "
            "least-served client first, a busy client's long prompts are held to its share "
            "of each engine step, and the most-served client's requests are preempted "
            "first when memory runs short (docs: Fair share); `false`: vLLM's priority "
            "scheduler, first come first served within a priority"
        ),
    ] = True
    engine_metrics: Annotated[
        bool,
        Flag(
            "vLLM's own `vllm:` Prometheus series on `/metrics` (latency histograms, KV "
            "cache use, token counts), kept per engine step and per token by vLLM's frontend "
            "(in the HTTP process, or in its own with `--engine-frontend-process`), as "
            "`vllm serve` keeps them by default; `false`: no `vllm:` series "
            "and less CPU per token (like `vllm serve --disable-log-stats`), while the "
            "`lilac_` series stay"
        ),
    ] = True
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
    grammar_warmup: Annotated[
        bool,
        Flag(
            "compile at start the bounded strings that every tool-call grammar and JSON "
            "schema shares (a few seconds of CPU before the server reports ready), so that "
            "no request pays for them; `false`: a sooner start, and the first requests with "
            "a grammar compile them (3-4 s here, which may pass `--grammar-compile-timeout`)"
        ),
    ] = True
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
    allowed_hosts: Annotated[
        tuple[str, ...],
        Flag(
            "more `Host` names a server without keys answers (loopback names, IP addresses "
            "and `--host` always), comma-separated",
            default_doc="none",
            parse=comma_names,
        ),
    ] = ()
    # Image input (app.services.images.service).
    allowed_origins: Annotated[
        tuple[str, ...],
        Flag(
            "web origins whose pages may call the API (CORS), comma-separated; `*` any",
            default_doc="none (no cross-origin access)",
            parse=comma_names,
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
    # Request bodies (app.transport.body_reads).
    body_read_timeout_s: Annotated[
        float,
        Flag(
            "seconds a request body that has not arrived whole may go without a byte; "
            "past it, 408 `request_timeout` and the connection is closed; `0`: no limit"
        ),
    ] = 30.0
    max_bodies_in_flight_per_client: Annotated[
        int,
        Flag(
            "requests from one client address (each server process) that may be sending "
            "their body at once; one more gets 429 `too_many_bodies_in_flight` at once "
            "and its connection is closed; `0`: no limit"
        ),
    ] = 64
