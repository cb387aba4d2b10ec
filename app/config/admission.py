"""The admission controller's flags (the documentation's "admission" table): lending the
GPU while its owner does not need it (engine.admission), the admission limits and the
admin key. Each is also a key of the `--config` TOML file's `[admission]` table; the
defaults are the controller's own, declared with its `Policy`.
"""

from __future__ import annotations

from typing import Annotated

from app.config.flag import Flag
from app.config.server import ServerFlags
from engine.admission.policy import Policy

_POLICY = Policy()  # the admission controller's defaults, declared with its policy
_ADMISSION = {"section": "admission", "toml": True}


class AdmissionFlags(ServerFlags, kw_only=True, frozen=True):
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
