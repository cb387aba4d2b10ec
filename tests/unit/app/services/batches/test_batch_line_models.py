"""The model a batch line runs on, as the deferred runner learns it: the name its body
gives, mapped to the name admission knows the model by (a served alias maps to the
model's first name), so that only interactive requests for that model cut the line."""

from __future__ import annotations

import json

from app.services.batches.lines import line_model
from app.services.batches.setup import admitted_model_names
from engine.scripted import ScriptedEngine
from engine.warm.pool import ModelPool
from engine.warm.sleeper import PauseSleeper


def _line(body: object) -> str:
    return json.dumps(
        {"custom_id": "c1", "method": "POST", "url": "/v1/chat/completions", "body": body}
    )


def test_a_lines_model_is_the_one_its_body_names() -> None:
    assert line_model(_line({"model": "beta", "messages": []})) == "beta"
    assert line_model(_line({"messages": []})) is None
    assert line_model(_line({"model": 7})) is None
    assert line_model("not json") is None


def test_a_served_alias_maps_to_the_models_first_name() -> None:
    pool = ModelPool(PauseSleeper())
    pool.add(ScriptedEngine(served_names=("alpha", "alpha-latest")))
    pool.add(ScriptedEngine(served_names=("beta",)))
    name = admitted_model_names(pool)
    assert name("alpha-latest") == "alpha" and name("alpha") == "alpha"
    assert name("beta") == "beta"
    assert name("gamma") is None  # not served: its line fails before admission
    assert admitted_model_names(None)("alpha") is None
