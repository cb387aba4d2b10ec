"""The access line's formats: JSON (one object a line) and text; never a body or a key."""

from __future__ import annotations

import json
import logging

import pytest

from app.observability import logs
from app.observability.context import RequestRecord, close_record, open_record


def _record(name: str, message: str, **extra: object) -> logging.LogRecord:
    record = logging.LogRecord(name, logging.INFO, __file__, 1, message, None, None)
    for key, value in extra.items():
        setattr(record, key, value)
    logs.RequestIdFilter().filter(record)
    return record


def test_json_access_line_has_the_fields_and_the_request_id() -> None:
    request = RequestRecord("rid-1", True, "POST", "/v1/chat/completions", status=429)
    request.outcome = "rate_limit_exceeded"
    token = open_record(request)
    try:
        fields = logs.access_fields(request, 0.25)
        line = logs.JsonFormatter().format(_record("lilac.access", "access", access=fields))
    finally:
        close_record(token)
    decoded = json.loads(line)
    assert decoded["request_id"] == "rid-1"
    assert decoded["event"] == "access"
    assert decoded["status"] == 429
    assert decoded["outcome"] == "rate_limit_exceeded"
    assert decoded["duration_s"] == 0.25
    assert decoded["endpoint"] == "/v1/chat/completions"
    assert "message" not in decoded and "body" not in decoded


def test_text_lines_show_the_id_only_inside_a_request() -> None:
    formatter = logs.TextFormatter()
    outside = formatter.format(_record("lilac.app", "engine ready"))
    assert "[" not in outside and outside.endswith("lilac.app: engine ready")
    token = open_record(RequestRecord("rid-2", False, "GET", "/v1/models"))
    try:
        inside = formatter.format(_record("lilac.app", "hello"))
    finally:
        close_record(token)
    assert inside.endswith("lilac.app [rid-2]: hello")


def test_configure_refuses_an_unknown_format() -> None:
    with pytest.raises(SystemExit, match="--log-format"):
        logs.configure("xml", "info")


def test_configure_json_writes_json_to_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    try:
        logs.configure("json", "info")
        logging.getLogger("lilac.test").warning("disk %s", "full")
        line = capsys.readouterr().err.strip().splitlines()[-1]
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
    decoded = json.loads(line)
    assert decoded == {
        **decoded,
        "level": "warning",
        "logger": "lilac.test",
        "message": "disk full",
    }


FORGED = "/x\nINFO lilac.access: event=access key_id=forged status=200"


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_a_forged_line_in_the_path_stays_one_escaped_field(log_format: str) -> None:
    request = RequestRecord("rid\r\n3", False, "GET", FORGED, status=404)
    token = open_record(request)
    try:
        fields = logs.access_fields(request, 0.01)
        formatter = logs.TextFormatter() if log_format == "text" else logs.JsonFormatter()
        line = formatter.format(_record("lilac.access", "access", access=fields))
    finally:
        close_record(token)
    assert "\n" not in line and "\r" not in line  # one line
    if log_format == "json":
        assert json.loads(line)["endpoint"] == FORGED
        return
    # The path is one quoted field: the forged `key_id=forged` is inside its quotes.
    assert f"endpoint={json.dumps(FORGED)}" in line
    assert " key_id=forged" not in line.replace(json.dumps(FORGED), "")
    assert "[rid\\r\\n3]" in line  # the request id escaped too


def test_a_message_with_control_characters_is_escaped() -> None:
    record = logging.LogRecord(
        "lilac.app", logging.WARNING, __file__, 1, "unknown model %s", ("a\nb\x1b[31m",), None
    )
    logs.RequestIdFilter().filter(record)
    line = logs.TextFormatter().format(record)
    assert "\n" not in line and "\x1b" not in line
    assert line.endswith("unknown model a\\nb\\u001b[31m")


def test_plain_values_stay_unquoted() -> None:
    assert logs.field_value("/v1/models") == "/v1/models"
    assert logs.field_value(200) == "200"
    assert logs.field_value("a b") == '"a b"'
    assert logs.field_value("") == '""'
