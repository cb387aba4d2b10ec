import jsonschema
import pytest

from engine.errors import EngineRequestError
from engine.schema_bounds import DEFAULT_CAPS, tighten
from engine.structured import JSON_OBJECT_SCHEMA, check_schema

MAX_STRING, MAX_ITEMS = DEFAULT_CAPS.string, DEFAULT_CAPS.items


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
    jsonschema.validate({"k": "v", "n": 3}, JSON_OBJECT_SCHEMA)


def test_check_schema_names_the_bad_place() -> None:
    with pytest.raises(EngineRequestError, match="properties/a/type") as caught:
        check_schema({"type": "object", "properties": {"a": {"type": "strin"}}}, "p")
    assert caught.value.param == "p"
    check_schema({"type": "object"}, "p")
