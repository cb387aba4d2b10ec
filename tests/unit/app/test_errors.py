from typing import Any

import msgspec
import pytest

from app.errors import APIError, InvalidRequest, ModelNotFound, ServiceUnavailable
from app.errors.handlers import error_response, to_api_error
from app.schemas.chat import chat_request_decoder
from engine.errors import (
    AwakeElsewhere,
    ContextLengthExceeded,
    EngineFailure,
    EngineUnavailable,
)


def decode_error(body: bytes) -> Exception:
    with pytest.raises(msgspec.DecodeError) as caught:
        chat_request_decoder.decode(body)
    return caught.value


def test_malformed_json_is_invalid_json() -> None:
    error = to_api_error(decode_error(b"{not json"))
    assert (error.status_code, error.code) == (400, "invalid_json")


def test_validation_error_names_the_field_path() -> None:
    body = b'{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":"a"}'
    error = to_api_error(decode_error(body))
    assert isinstance(error, InvalidRequest)
    assert error.param == "max_tokens"
    assert "Expected `int | null`, got `str`" in error.message


def test_missing_nested_field_names_the_full_path() -> None:
    error = to_api_error(decode_error(b'{"model":"m","messages":[{"role":"user"}]}'))
    assert error.param == "messages[0].content"


def test_context_length_maps_to_400_with_code() -> None:
    error = to_api_error(ContextLengthExceeded(100, 50, 120))
    assert error.status_code == 400
    assert error.code == "context_length_exceeded"
    assert "150 tokens" in error.message and "120" in error.message


def test_engine_failure_hides_internals() -> None:
    error = to_api_error(EngineFailure("RuntimeError('CUDA out of memory at 0xdead')"))
    assert error.status_code == 500
    assert "0xdead" not in error.message


def test_unexpected_exception_is_a_generic_500() -> None:
    error = to_api_error(KeyError("secret"))
    assert type(error) is APIError
    assert "secret" not in error.message


def test_unavailable_engine_is_503_with_retry_after() -> None:
    response = error_response(to_api_error(EngineUnavailable("loading")))
    assert response.status_code == 503
    assert response.headers["Retry-After"] == "5"


def test_model_not_found_shape() -> None:
    response = error_response(ModelNotFound("nope"))
    body = msgspec.json.decode(response.content)
    assert response.status_code == 404
    assert body["error"]["code"] == "model_not_found"
    assert body["error"]["param"] == "model"


def test_service_unavailable_keeps_retry_after() -> None:
    assert error_response(ServiceUnavailable("busy", retry_after=9)).headers["Retry-After"] == "9"


def test_a_model_asleep_here_is_a_429_a_router_retries_elsewhere() -> None:
    # 429: retried on another box by vLLM's router and sglang-router, and not counted
    # against this box's circuit breaker (a 5xx would be).
    response = error_response(to_api_error(AwakeElsewhere("asleep here")))
    body = msgspec.json.decode(response.content)
    assert response.status_code == 429 and response.headers["Retry-After"] == "1"
    assert body["error"]["code"] == "model_asleep_here"


async def test_a_locked_database_is_a_503_with_retry_after(tmp_path: Any) -> None:
    """A real SQLite file another connection holds locked past the busy wait: the
    driver's error reaches the one mapping, which answers 503 `database_unavailable`."""
    import sqlite3

    from sqlalchemy import text

    from app.db.engine import create_engine

    path = tmp_path / "locked.db"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("CREATE TABLE t (x INTEGER)")
    holder.execute("BEGIN EXCLUSIVE")
    engine = create_engine(f"sqlite:///{path}", busy_timeout_ms=50)
    try:
        with pytest.raises(Exception) as raised:
            async with engine.begin() as conn:
                await conn.execute(text("INSERT INTO t VALUES (1)"))
    finally:
        await engine.dispose()
        holder.execute("ROLLBACK")
        holder.close()
    error = to_api_error(raised.value)
    assert (error.status_code, error.code) == (503, "database_unavailable")
    assert int(error.headers()["Retry-After"]) >= 1
    assert "locked" not in error.message  # the reason is the operator's, not the client's
