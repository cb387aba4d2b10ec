"""Log lines as text or JSON, each carrying the id of the request it was written for.

`configure` installs one stderr handler on the root logger with `RequestIdFilter`, so
any logger's record written while a request is current gets that request's id. The
access line (`access_line`) is one record per request on the `lilac.access` logger,
its fields in `record.access`.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import time
from typing import Any

from app.observability.context import RequestRecord, current_request_id

access_log = logging.getLogger("lilac.access")
FORMATS = ("text", "json")


class RequestIdFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "request_id"):
            record.request_id = current_request_id()
        return True


# Characters that could end a log line or pass for another: control characters (line
# breaks included), C1 controls and Unicode's line and paragraph separators.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
# A field value that must be quoted to stay one field: these, or a space, `=` or `"`.
_NEEDS_QUOTES = re.compile('[\x00-\x20\x7f-\x9f\u2028\u2029="]')


def escaped(text: str) -> str:
    """`text` with every control character written as an escape (`\\n`, `\\x1b`)."""
    return _CONTROL.sub(lambda m: json.dumps(m.group())[1:-1], text)


def field_value(value: object) -> str:
    """A text access line's value: as it is, or quoted and escaped (logfmt) when it
    holds anything that could split it or forge another field or line."""
    text = str(value)
    return json.dumps(text) if not text or _NEEDS_QUOTES.search(text) else text


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s%(rid)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        request_id = getattr(record, "request_id", None)
        record.rid = f" [{escaped(str(request_id))}]" if request_id else ""
        access = getattr(record, "access", None)
        if access is not None:
            record.msg = " ".join(
                f"{k}={field_value(v)}" for k, v in access.items() if v is not None
            )
        else:  # a message may carry what a client sent (a model name, a path)
            record.msg = escaped(record.getMessage())
        record.args = None
        return super().format(record)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
        }
        request_id = getattr(record, "request_id", None)
        if request_id:
            line["request_id"] = request_id
        access = getattr(record, "access", None)
        if access is not None:
            line.update(access)
        else:
            line["message"] = record.getMessage()
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


def configure(log_format: str, level: str) -> None:
    """One handler on the root logger: `log_format` is `text` or `json`."""
    if log_format not in FORMATS:
        raise SystemExit(f"--log-format: expected one of {', '.join(FORMATS)}, got {log_format!r}")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    handler.addFilter(RequestIdFilter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())


def access_fields(record: RequestRecord, duration_s: float) -> dict[str, Any]:
    """The access line's fields: what was asked and how it went, never a body or a key."""
    fields: dict[str, Any] = {
        "event": "access",
        "key_id": record.key_id,
        "method": record.method,
        "endpoint": record.path,
        "model": record.model,
        "status": record.status,
        "outcome": record.outcome or ("ok" if record.status < 400 else "error"),
        "prompt_tokens": None,
        "completion_tokens": None,
        "queue_s": _round(record.queue_s),
        "ttft_s": None,
        "duration_s": _round(duration_s),
    }
    generation = record.usage_source
    if generation is not None:
        usage = generation.usage()
        fields["prompt_tokens"] = usage.prompt_tokens
        fields["completion_tokens"] = usage.completion_tokens
        if generation.first_output_at is not None:
            fields["ttft_s"] = _round(generation.first_output_at - record.started)
    return fields


def access_line(record: RequestRecord, duration_s: float) -> None:
    if access_log.isEnabledFor(logging.INFO):
        access_log.info("access", extra={"access": access_fields(record, duration_s)})


def _round(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds, 4)
