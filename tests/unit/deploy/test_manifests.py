"""The deployment recipes point at paths the app serves and keep their timings in step."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from app.main import create_app
from app.settings import Settings
from engine.scripted import ScriptedEngine

DEPLOY = Path(__file__).resolve().parents[3] / "deploy"


def _app_paths() -> set[str]:
    return {route.path for route in create_app(Settings(), engine=ScriptedEngine()).routes}


def test_kubernetes_probes_drain_and_grace_period_fit_the_app() -> None:
    documents = list(yaml.safe_load_all((DEPLOY / "kubernetes" / "lilac-serve.yaml").read_text()))
    daemon = next(d for d in documents if d["kind"] == "DaemonSet")
    pod = daemon["spec"]["template"]["spec"]
    container = pod["containers"][0]
    paths = _app_paths()
    assert container["readinessProbe"]["httpGet"]["path"] == "/health"
    assert container["livenessProbe"]["httpGet"]["path"] == "/health/live"
    assert {"/health", "/health/live"} <= paths
    assert "drain.py" in " ".join(container["lifecycle"]["preStop"]["exec"]["command"])
    grace_flag = next(a for a in container["args"] if a.startswith("--grace-period="))
    grace = float(grace_flag.split("=", 1)[1])
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert float(env["LILAC_GRACE_PERIOD"]) == grace
    assert pod["terminationGracePeriodSeconds"] >= 2 * grace + 15
    assert pod["hostPID"] is True


def test_the_drain_script_calls_admin_routes_that_exist() -> None:
    text = (DEPLOY / "drain.py").read_text()
    called = set(re.findall(r"\{base\}(/admin/[a-z/]+)", text))
    assert called == {"/admin/admission/drain", "/admin/admission"}
    assert called <= _app_paths()


def test_the_router_recipe_polls_health_like_the_readme_says() -> None:
    documents = list(yaml.safe_load_all((DEPLOY / "kubernetes" / "lilac-serve.yaml").read_text()))
    router = next(d for d in documents if d["kind"] == "Deployment")
    command = " ".join(router["spec"]["template"]["spec"]["containers"][0]["args"])
    assert "sglang-router==0.3.2" in command
    assert "--health-check-endpoint /health" in command
    assert "--service-discovery-port 8000" in command
