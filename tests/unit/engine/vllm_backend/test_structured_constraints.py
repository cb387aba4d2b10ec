"""structured_outputs constraints -> vLLM params; a bad regex, grammar or structural tag
is a 400 naming its field before it can reach the engine core (where it was a 500)."""

import json

import pytest

from engine.errors import EngineRequestError
from engine.protocol import StructuredOutput
from engine.vllm_backend.structured import other_constraint


@pytest.mark.parametrize(
    "constraint",
    [
        StructuredOutput(grammar="root ::= undefined_rule", param="structured_outputs.grammar"),
        StructuredOutput(regex="[unclosed", param="guided_regex"),
        StructuredOutput(structural_tag=json.dumps({"type": "nonsense"}), param="t"),
    ],
)
def test_bad_constraints_are_request_errors(constraint: StructuredOutput) -> None:
    with pytest.raises(EngineRequestError) as raised:
        other_constraint(constraint)
    assert raised.value.param == constraint.param


def test_good_constraints_become_params() -> None:
    params = other_constraint(StructuredOutput(grammar='root ::= "a" | "b"', param="g"))
    assert params.grammar == 'root ::= "a" | "b"'
    assert other_constraint(StructuredOutput(regex="[0-9]+", param="r")).regex == "[0-9]+"
    assert other_constraint(StructuredOutput(choice=["x"], param="c")).choice == ["x"]
    assert other_constraint(StructuredOutput(schema={"type": "object"})) is None
