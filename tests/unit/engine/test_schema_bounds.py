import jsonschema
import pytest

from engine.errors import EngineRequestError
from engine.schema_bounds import (
    DEFAULT_CAPS,
    check_schema,
    fit_to_budget,
    tighten,
    worst_case_tokens,
)

MAX_STRING, MAX_ITEMS = DEFAULT_CAPS.string, DEFAULT_CAPS.items

EVENT = {
    "type": "object",
    "properties": {
        "title": {"type": "string"},
        "attendees": {
            "type": "array",
            "items": {"type": "object", "properties": {"name": {"type": "string"}}},
        },
        "day": {"type": "integer", "minimum": 1, "maximum": 31},
    },
    "required": ["title"],
}


def test_worst_case_counts_every_bound() -> None:
    assert worst_case_tokens({"type": "string", "maxLength": 10}) == 12
    assert worst_case_tokens({"type": "integer", "minimum": -5, "maximum": 999}) == 4
    assert worst_case_tokens({"enum": ["a", "bbbb"]}) == 6
    array = {"type": "array", "maxItems": 3, "items": {"type": "boolean"}}
    assert worst_case_tokens(array) == 2 + 3 * 6
    assert (
        worst_case_tokens({"anyOf": [{"type": "null"}, {"type": "string", "maxLength": 50}]}) == 52
    )


def test_default_bounds_when_the_budget_is_large_or_unknown() -> None:
    assert fit_to_budget(EVENT, None) == tighten(EVENT)
    assert fit_to_budget(EVENT, 10**6) == tighten(EVENT)


def test_small_budget_shrinks_added_bounds_until_the_document_fits() -> None:
    fitted = fit_to_budget(EVENT, 160)
    assert worst_case_tokens(fitted) <= 160
    props = fitted["properties"]
    assert props["title"]["maxLength"] < DEFAULT_CAPS.string
    assert props["attendees"]["maxItems"] < DEFAULT_CAPS.items
    assert props["day"] == {"type": "integer", "minimum": 1, "maximum": 31}  # the client's
    jsonschema.validate({"title": "standup", "attendees": [{"name": "Ann"}]}, fitted)


def test_declared_bounds_are_never_shrunk() -> None:
    schema = {"type": "string", "minLength": 300}
    assert fit_to_budget(schema, 50)["maxLength"] == 300


def test_tighten_bounds_strings_arrays_numbers_and_objects() -> None:
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "count": {"type": "integer"},
            "ratio": {"type": "number"},
        },
    }
    tight = tighten(schema)
    props = tight["properties"]
    assert props["name"]["maxLength"] == MAX_STRING
    assert props["tags"]["maxItems"] == MAX_ITEMS
    assert props["tags"]["items"]["maxLength"] == MAX_STRING
    assert props["count"]["maximum"] == 10**9 and props["count"]["minimum"] == -(10**9)
    assert "maximum" in props["ratio"]
    assert tight["additionalProperties"] is False
    assert "maxLength" not in schema["properties"]["name"]  # the original is untouched


def test_tighten_keeps_declared_bounds_and_enums() -> None:
    schema = {
        "type": "object",
        "properties": {
            "code": {"type": "string", "minLength": 300},
            "level": {"enum": ["a", "b"]},
            "n": {"type": "integer", "minimum": 1, "maximum": 5},
        },
        "additionalProperties": True,
    }
    tight = tighten(schema)
    assert tight["properties"]["code"]["maxLength"] == 300
    assert tight["properties"]["level"] == {"enum": ["a", "b"]}
    assert tight["properties"]["n"] == {"type": "integer", "minimum": 1, "maximum": 5}
    assert tight["additionalProperties"] is True


def test_tighten_walks_combinators_and_defs() -> None:
    schema = {
        "anyOf": [{"type": "string"}, {"$ref": "#/$defs/x"}],
        "$defs": {"x": {"type": "array"}},
    }
    tight = tighten(schema)
    assert tight["anyOf"][0]["maxLength"] == MAX_STRING
    assert tight["$defs"]["x"]["maxItems"] == MAX_ITEMS


def test_what_tightened_accepts_the_original_accepts() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    document = {"a": "x" * 10}
    jsonschema.validate(document, tighten(schema))
    jsonschema.validate(document, schema)
    jsonschema.validate({"k": "v", "n": 3}, tighten({"type": "object"}))


def test_check_schema_names_the_bad_place() -> None:
    with pytest.raises(EngineRequestError, match="properties/a/type") as caught:
        check_schema({"type": "object", "properties": {"a": {"type": "strin"}}}, "p")
    assert caught.value.param == "p"
    check_schema({"type": "object"}, "p")


def test_a_schema_found_valid_is_remembered_and_an_invalid_one_never() -> None:
    from engine import schema_bounds

    valid = {"type": "object", "properties": {"remembered": {"type": "integer"}}}
    invalid = {"type": "object", "properties": {"remembered": {"type": "integr"}}}
    before = len(schema_bounds._valid)
    for _ in range(3):
        check_schema(valid, "p")
        with pytest.raises(EngineRequestError, match="properties/remembered/type"):
            check_schema(invalid, "p")
    assert len(schema_bounds._valid) == before + 1  # the valid one, once
    # The size bounds still apply first: a remembered schema is checked for size again.
    with pytest.raises(EngineRequestError):
        check_schema({"type": "object", "enum": ["x" * 200_000]}, "p")
