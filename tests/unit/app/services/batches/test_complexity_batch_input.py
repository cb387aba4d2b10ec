"""Complexity of what reads an uploaded file's bytes: the multipart reader (boundaries,
the file part counted and spooled), the line splitter and the batch line check, on the
shapes that would make a careless one quadratic: one line spread over many chunks,
many lines, long custom_ids sharing a prefix, brackets that force the depth scan, a
boundary look-alike repeated in the file.

Each case runs at n, 2n, 4n and 8n; its CPU time must grow about linearly
(tests.corpus.growth)."""

from __future__ import annotations

import io
import json
from collections.abc import Callable

import pytest
from multipart import PushMultipartParser

from app.errors import InvalidRequest
from app.services.batches.input import BatchRules, validate_batch_file
from app.storage.lines import LineCounter, LineSplitter
from app.transport.uploads import FileLimits, FormReader, Upload
from tests.corpus.growth import assert_linear, swallow

RULES = BatchRules(allows_model=lambda name: name == "m")
SMALL_CHUNK = 4096


def request_line(custom_id: str, content: str = "hi") -> bytes:
    body = {"model": "m", "messages": [{"role": "user", "content": content}]}
    line = {"custom_id": custom_id, "method": "POST", "url": "/v1/completions", "body": body}
    return json.dumps(line).encode()


def in_chunks(data: bytes, size: int = SMALL_CHUNK) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


def many_lines(n: int) -> list[bytes]:
    return in_chunks(b"\n".join(request_line(f"r{i}") for i in range(n // 64 + 1)))


def one_long_line(n: int) -> list[bytes]:
    return in_chunks(request_line("only", "x" * n), 64)  # tiny chunks: thousands of pieces


def shared_prefix_ids(n: int) -> list[bytes]:
    prefix = "p" * 256
    return in_chunks(b"\n".join(request_line(f"{prefix}{i}") for i in range(n // 300 + 1)))


def brackets_in_strings(n: int) -> list[bytes]:
    return in_chunks(b"\n".join(request_line(f"r{i}", "[{" * 40) for i in range(n // 200 + 1)))


def blank_lines(n: int) -> list[bytes]:
    return in_chunks(b" \r\n" * n + request_line("last"))


def deep_line(n: int) -> list[bytes]:
    return in_chunks(b'{"custom_id": "a", "x": ' + b"[" * n)  # refused, after a linear scan


SHAPES: dict[str, Callable[[int], list[bytes]]] = {
    "many lines": many_lines,
    "one long line in many chunks": one_long_line,
    "custom_ids sharing a long prefix": shared_prefix_ids,
    "brackets inside strings": brackets_in_strings,
    "blank lines": blank_lines,
    "a deep line": deep_line,
}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_the_batch_line_check_is_linear(shape: str) -> None:
    check = swallow(lambda chunks: validate_batch_file(chunks, RULES), InvalidRequest)
    assert_linear(check, SHAPES[shape], 4_000)


def naive_split(chunks: list[bytes]) -> int:
    """A splitter that carries the unfinished line by concatenation: each chunk copies
    the line so far again, quadratic in a line spread over many chunks."""
    carry, lines = b"", 0
    for chunk in chunks:
        *done, carry = (carry + chunk).split(b"\n")
        lines += len(done)
    return lines


def test_the_growth_check_fails_for_a_splitter_that_concatenates() -> None:
    with pytest.raises(AssertionError, match=r"t\(8n\)/t\(n\)"):
        assert_linear(naive_split, one_long_line, 20_000, max_n=20_000, attempts=1)


def split_all(chunks: list[bytes]) -> int:
    splitter, counter = LineSplitter(), LineCounter()
    lines = 0
    for chunk in chunks:
        lines += len(splitter.feed(chunk))
        counter.feed(chunk)
    return lines + (splitter.finish() is not None) + counter.finish()


# The splitter does not read the lines: a repeated line is as good as distinct ones.
SPLIT_SHAPES: dict[str, Callable[[int], list[bytes]]] = {
    "many lines": lambda n: in_chunks((request_line("r") + b"\n") * (n // 64 + 1)),
    "one long line in many chunks": one_long_line,
    "blank lines": blank_lines,
    "line ends at chunk edges": lambda n: in_chunks(b"x" * 63 + b"\n", 64) * (n // 64 + 1),
}


@pytest.mark.parametrize("shape", list(SPLIT_SHAPES))
def test_splitting_and_counting_lines_is_linear(shape: str) -> None:
    assert_linear(split_all, SPLIT_SHAPES[shape], 4_000)


BOUNDARY = "----formboundary1234567890"


def form(file: bytes) -> list[bytes]:
    head = (
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n'
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="a"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n"
    ).encode()
    return in_chunks(head + file + f"\r\n--{BOUNDARY}--\r\n".encode(), 65536)


def read_form(chunks: list[bytes]) -> int:
    upload = Upload(spool=io.BytesIO())
    reader = FormReader(upload, FileLimits(max_bytes=1 << 40, max_lines=1 << 40))
    parser = PushMultipartParser(BOUNDARY)
    for chunk in [*chunks, b""]:
        reader.feed(parser, chunk)
    return upload.size


FORM_SHAPES: dict[str, Callable[[int], list[bytes]]] = {
    "lines": lambda n: form((request_line("r") + b"\n") * (n // 64 + 1)),
    "boundary look-alikes": lambda n: form(f"\r\n--{BOUNDARY[:-1]}".encode() * (n // 30 + 1)),
    "carriage returns": lambda n: form(b"\r" * n),
}


@pytest.mark.parametrize("shape", list(FORM_SHAPES))
def test_reading_the_form_is_linear(shape: str) -> None:
    assert_linear(read_form, FORM_SHAPES[shape], 4_000)
