import pytest

from engine.errors import EngineRequestError
from engine.vllm_backend.structured import check_schema


def test_check_schema_names_the_bad_place() -> None:
    with pytest.raises(EngineRequestError, match="properties/a/type") as caught:
        check_schema({"type": "object", "properties": {"a": {"type": "strin"}}}, "p")
    assert caught.value.param == "p"
    check_schema({"type": "object"}, "p")
