"""Glue between the server settings and the admission controller (`engine.admission`)."""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

from app.config.settings import Settings
from app.errors import InvalidRequest
from app.tenancy.keys.auth import bearer_token
from app.tenancy.middleware import credentials
from engine.admission.lending import parse_windows
from engine.admission.policy import Policy
from engine.admission.probes import Probe, make_probe
from engine.admission.runtime import AdmissionController, AdmittedHost
from engine.checks import default_output_tokens
from engine.protocol import GenerateRequest

if TYPE_CHECKING:
    from app.tenancy.service import HttpRequest


def policy_from(settings: Settings) -> Policy:
    windows = None
    if settings.lending_windows:
        try:
            windows = parse_windows(settings.lending_windows, settings.lending_timezone)
        except (ValueError, KeyError) as exc:  # ZoneInfo raises a KeyError subclass
            raise SystemExit(f"--lending-windows: {exc}") from exc
    return Policy(
        busy_util_pct=settings.owner_busy_util,
        light_util_pct=settings.owner_light_util,
        busy_memory_mib=settings.owner_busy_memory_mib,
        grace_s=settings.grace_period,
        resume_after_s=settings.resume_after,
        probe_interval_s=settings.probe_interval,
        max_concurrent=settings.max_concurrent,
        throttled_concurrent=settings.throttled_concurrent,
        max_queued=settings.max_queued,
        queue_timeout_s=settings.queue_timeout,
        max_request_tokens=settings.max_request_tokens,
        kv_budget_tokens=settings.kv_budget_tokens,
        release_memory=settings.release_memory,
        windows=windows,
    )


def probe_from(settings: Settings) -> Probe:
    spec = settings.gpu_probe or ("nvml" if settings.on_gpu else "none")
    try:
        return make_probe(spec)
    except ImportError as exc:
        raise SystemExit(f"--gpu-probe {spec}: {exc} (install the `gpu` extra)") from exc
    except Exception as exc:  # a bad timeline file, or NVML failing to initialise
        raise SystemExit(f"--gpu-probe {spec}: {exc}") from exc


def build_controller(
    settings: Settings, engine: AdmittedHost, probe: Probe | None = None
) -> AdmissionController:
    return AdmissionController(policy_from(settings), probe or probe_from(settings), engine)


# The most urgent priority a request without an API key may ask for (lower is sooner).
PUBLIC_PRIORITY_FLOOR = 0


def clamp_priority(requested: int, floor: int = PUBLIC_PRIORITY_FLOOR) -> int:
    """The priority a request runs at: what it asked for, but never more urgent than
    `floor` (its key's tier; 0 without keys). Asking to go later is always allowed."""
    return max(requested, floor)


def check_request_work(
    generates: list[GenerateRequest], max_model_len: int, max_request_tokens: int
) -> None:
    """Refuse (400) a request whose choices may generate more than `max_request_tokens`
    in all: `n` x `max_tokens` (its model default when left out), over every prompt."""
    total = 0
    for generate in generates:
        sampling = generate.sampling
        per_choice = sampling.max_tokens or default_output_tokens(max_model_len)
        total += sampling.n * per_choice
    if max_request_tokens > 0 and total > max_request_tokens:
        param = "n" if len(generates) == 1 and generates[0].sampling.n > 1 else "max_tokens"
        raise InvalidRequest(
            f"This request may generate up to {total} tokens (`n` x `max_tokens` over every "
            f"prompt); the server allows {max_request_tokens} per request.",
            param=param,
            code="request_too_large",
        )


def client_key(request: HttpRequest, user: str | None, key_id: str | None = None) -> str:
    """Whom fairness counts a request against: the authenticated key's id when there
    is one (nothing the client can vary), else its bearer token or `x-api-key` (hashed:
    the token itself is never kept), else the `user` field, else the peer address."""
    if key_id is not None:
        return "key:" + key_id
    token = bearer_token(credentials(request.scope))
    if token is not None:
        return "key:" + hashlib.sha256(token.encode()).hexdigest()[:16]
    if user:
        return "user:" + user
    return "peer:" + (request.client.host if request.client else "unknown")
