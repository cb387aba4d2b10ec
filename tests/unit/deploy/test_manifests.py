"""The deployment recipes point at paths the app serves, keep their timings in step, and
start the server with API keys: the settings they give, read by the real parser, are
`--auth keys` with a database and an admin key from a secret; the probes they call
need no key."""

from __future__ import annotations

import argparse
import json
import re
import shlex
from pathlib import Path
from typing import Any

import yaml

from app.config.settings import Settings
from app.config.sources import build_parser, settings_from
from app.main import create_app
from app.tenancy.middleware import OPEN_PATHS
from app.tenancy.service import auth_mode, database_url
from engine.scripted import ScriptedEngine

DEPLOY = Path(__file__).resolve().parents[3] / "deploy"


def _serve_settings(argv: list[str], environ: dict[str, str]) -> Settings:
    """What `lilac-serve ARGV` serves with, given the environment."""
    if argv and argv[0] == "serve":
        argv = argv[1:]
    return settings_from(build_parser(argparse.ArgumentParser()).parse_args(argv), environ)


def _daemon_container() -> dict[str, Any]:
    documents = list(yaml.safe_load_all((DEPLOY / "kubernetes" / "lilac-serve.yaml").read_text()))
    daemon = next(d for d in documents if d["kind"] == "DaemonSet")
    container: dict[str, Any] = daemon["spec"]["template"]["spec"]["containers"][0]
    return container


def _dockerfile() -> dict[str, Any]:
    """The Dockerfile's ENV (as a mapping), VOLUME, ENTRYPOINT + CMD and HEALTHCHECK."""
    text = (DEPLOY / "Dockerfile").read_text().replace("\\\n", " ")
    instructions = [line.split(None, 1) for line in text.splitlines() if line and line[0] != "#"]
    found: dict[str, Any] = {"ENV": {}}
    for word, rest in instructions:
        if word == "ENV":
            found["ENV"].update(item.split("=", 1) for item in shlex.split(rest))
        elif word in ("ENTRYPOINT", "CMD"):
            found[word] = json.loads(rest)
        else:
            found[word] = rest.strip()
    return found


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


def test_the_router_recipe_polls_health_like_the_fleet_page_says() -> None:
    documents = list(yaml.safe_load_all((DEPLOY / "kubernetes" / "lilac-serve.yaml").read_text()))
    router = next(d for d in documents if d["kind"] == "Deployment")
    command = " ".join(router["spec"]["template"]["spec"]["containers"][0]["args"])
    assert "sglang-router==0.3.2" in command
    assert "--health-check-endpoint /health" in command
    assert "--service-discovery-port 8000" in command


def test_kubernetes_pods_serve_with_keys_from_secrets() -> None:
    container = _daemon_container()
    secrets = {
        e["name"]: e["valueFrom"]["secretKeyRef"] for e in container["env"] if "valueFrom" in e
    }
    assert set(secrets) >= {"LILAC_ADMIN_KEY", "LILAC_DATABASE_URL"}
    environ = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    environ |= {"LILAC_ADMIN_KEY": "from-a-secret", "LILAC_DATABASE_URL": "postgresql://db/x"}
    settings = _serve_settings(container["args"], environ)
    assert auth_mode(settings) == "keys"
    assert database_url(settings) == "postgresql://db/x"  # one database all pods share
    assert settings.resolved_admin_key() == "from-a-secret"
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"]["path"] in OPEN_PATHS  # probes send no key


def test_the_container_image_serves_with_keys_and_its_probe_needs_none() -> None:
    docker = _dockerfile()
    assert docker["ENTRYPOINT"] == ["lilac-serve"] and docker["CMD"] == ["serve"]
    env = docker["ENV"]
    settings = _serve_settings(docker["CMD"], env)
    assert auth_mode(settings) == "keys" and settings.host == "0.0.0.0"
    assert settings.data_dir == docker["VOLUME"]  # the database outlives the container
    assert "LILAC_ADMIN_KEY" not in env and "admin" not in " ".join(docker["ENTRYPOINT"])
    # `docker run IMAGE --model M` keeps the keys settings: they are not in CMD.
    assert auth_mode(_serve_settings(["--model", "M"], env)) == "keys"
    probed = re.search(r"http://127\.0\.0\.1:8000(/[a-z/]*)", docker["HEALTHCHECK"])
    assert probed is not None and probed.group(1) in OPEN_PATHS
    assert probed.group(1) in _app_paths()


def test_the_model_routing_recipe_puts_pods_of_every_model_behind_the_plain_router() -> None:
    path = DEPLOY / "kubernetes" / "lilac-serve-models.yaml"
    documents = list(yaml.safe_load_all(path.read_text()))
    daemon = next(d for d in documents if d["kind"] == "DaemonSet")
    pod = daemon["spec"]["template"]["spec"]
    container = pod["containers"][0]
    env = {e["name"]: e.get("value", "set") for e in container["env"]}
    settings = _serve_settings(container["args"], env)
    # One shared database: the pods publish their models in it, which routes by model.
    assert auth_mode(settings) == "keys" and database_url(settings) == "set"
    assert settings.fleet_models_heartbeat_s > 0
    model = daemon["metadata"]["labels"]["lilac.dev/model"]
    assert tuple(settings.served_model_name) == (model,)
    assert pod["nodeSelector"]["lilac.dev/model"] == model
    assert "postStart" not in container.get("lifecycle", {})  # nothing to register
    router = next(d for d in documents if d["kind"] == "Deployment")
    spec = router["spec"]["template"]["spec"]
    args = spec["containers"][0]["args"][0]
    assert "vllm-router==0.1.17" in args and "--enable-igw" not in args
    assert "--health-check-endpoint /health" in args
    selector = re.search(r"--selector (\S+)", args)
    assert selector is not None
    assert selector.group(1) == "app=" + daemon["spec"]["template"]["metadata"]["labels"]["app"]
    role = next(d for d in documents if d["kind"] == "RoleBinding")
    assert role["subjects"][0]["name"] == spec["serviceAccountName"]
    # A model asleep on a pod goes first where it is awake; a request refused by the pods
    # without its model is retried: attempts enough for every pod.
    assert settings.prefer_awake_elsewhere
    retries = re.search(r"--retry-max-retries (\d+)", args)
    assert retries is not None and int(retries.group(1)) >= 3
    service = next(d for d in documents if d["kind"] == "Service")
    assert service["metadata"]["name"] == "lilac-model-router"
    paths = _app_paths()
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"]["path"] in paths
