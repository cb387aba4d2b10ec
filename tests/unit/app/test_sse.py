import msgspec

from app.schemas.errors import ErrorBody
from app.transport.sse import DONE, error_frame, frame


class Payload(msgspec.Struct):
    text: str


def test_frame_is_one_data_event() -> None:
    assert frame(Payload(text="a\nb")) == b'data: {"text":"a\\nb"}\n\n'


def test_done_event() -> None:
    assert DONE == b"data: [DONE]\n\n"


def test_error_frame_uses_the_envelope() -> None:
    encoded = error_frame(ErrorBody(message="boom", type="server_error", code="x"))
    assert encoded.startswith(b"data: ") and encoded.endswith(b"\n\n")
    body = msgspec.json.decode(encoded[6:])
    assert body == {
        "error": {"message": "boom", "type": "server_error", "param": None, "code": "x"}
    }
