import jsonschema

from engine.schema_bounds import DEFAULT_CAPS, fit_to_budget, tighten, worst_case_tokens

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
