"""Glue between the server settings and the admission controller (`engine.admission`)."""

from __future__ import annotations

import hashlib

from litestar import Request

from app.settings import Settings
from engine.admission.lending import parse_windows
from engine.admission.policy import Policy
from engine.admission.probes import Probe, make_probe
from engine.admission.runtime import AdmissionController
from engine.protocol import Engine


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
        max_queued_per_client=settings.max_queued_per_client,
        queue_timeout_s=settings.queue_timeout,
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
    settings: Settings, engine: Engine, probe: Probe | None = None
) -> AdmissionController:
    return AdmissionController(policy_from(settings), probe or probe_from(settings), engine)


def clamp_priority(requested: int, floor: int) -> int:
    """A request's admission priority (lower: sooner), no better than `floor`: the
    key's tier, or 0 without keys."""
    return max(requested, floor)


def client_key(request: Request, user: str | None, key_id: str | None = None) -> str:
    """Whom fairness counts a request against: the authenticated key's id when there
    is one (nothing the client can vary), else its bearer token (hashed: the token
    itself is never kept), else the `user` field, else the peer address."""
    if key_id is not None:
        return "key:" + key_id
    authorization = request.headers.get("authorization", "")
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return "key:" + hashlib.sha256(token.strip().encode()).hexdigest()[:16]
    if user:
        return "user:" + user
    return "peer:" + (request.client.host if request.client else "unknown")
