"""Reasoning carried by the client: `include: ["reasoning.encrypted_content"]`.

A stateless client (`store: false`) sends each reasoning item back in its next turn's
`input`; the server puts the reasoning back into the prompt where the family's template
expects it. The client carries it sealed: AES-256-GCM under a server secret, with the
owner (the API key's id) as associated data. So the blob is opaque, a changed byte or
another tenant's blob fails authentication (a 400), and one key cannot make the server
render reasoning it did not produce for that key.

The secret is 32 random bytes in the data directory (`responses-reasoning.key`, mode
0600), made on first use; replicas that should read each other's blobs share it (the
same data directory, or a copy of the file). Replacing the file invalidates every blob
in circulation: their next turn is a 400 and the client starts over.
"""

from __future__ import annotations

import base64
import binascii
import os
import threading
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from app.errors import InvalidRequest

SECRET_FILE = "responses-reasoning.key"
_PREFIX = "lsr1."  # the format's version: a later format can tell its own blobs apart
_AAD = b"lilac-serve reasoning\x00"
_NONCE = 12
# A sealed blob longer than this is refused before any decoding (a request body is
# bounded anyway; this keeps one item's work small).
MAX_SEALED_CHARS = 4 * 1024 * 1024


class ReasoningSeal:
    """Seals and opens reasoning text for one owner; the secret is read on first use."""

    def __init__(self, data_dir: str | Path | None = None, secret: bytes | None = None) -> None:
        self._dir = Path(data_dir).expanduser() if data_dir is not None else None
        self._aead = AESGCM(secret) if secret is not None else None
        self._lock = threading.Lock()

    def seal(self, owner: str, text: str) -> str:
        nonce = os.urandom(_NONCE)
        sealed = self._cipher().encrypt(nonce, text.encode(), _AAD + owner.encode())
        return _PREFIX + base64.urlsafe_b64encode(nonce + sealed).decode()

    def open(self, owner: str, blob: str, param: str) -> str:
        """The text `seal(owner, ...)` sealed; a 400 naming `param` for anything else."""
        refused = InvalidRequest(
            "`encrypted_content` was not produced by this server for this API key, or was changed.",
            param=param,
            code="invalid_encrypted_content",
        )
        if len(blob) > MAX_SEALED_CHARS or not blob.startswith(_PREFIX):
            raise refused
        try:
            raw = base64.urlsafe_b64decode(blob[len(_PREFIX) :].encode())
        except (binascii.Error, ValueError):
            raise refused from None
        if len(raw) <= _NONCE:
            raise refused
        try:
            plain = self._cipher().decrypt(raw[:_NONCE], raw[_NONCE:], _AAD + owner.encode())
        except InvalidTag:
            raise refused from None
        return plain.decode()

    def _cipher(self) -> AESGCM:
        if self._aead is None:
            with self._lock:
                if self._aead is None:
                    if self._dir is None:
                        raise RuntimeError("no data directory for the reasoning secret")
                    self._aead = AESGCM(load_secret(self._dir))
        return self._aead


def load_secret(data_dir: Path) -> bytes:
    """The secret in `data_dir`, made (32 random bytes, owner-only) if it is not there.
    It is written whole to a file of its own, then linked into place: a process reading
    it never sees half of it, and of two making it at once, one wins and both read it."""
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = data_dir / SECRET_FILE
    if not path.exists():
        temporary = data_dir / f".{SECRET_FILE}.{os.getpid()}.{threading.get_ident()}"
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "wb") as out:
            out.write(os.urandom(32))
        try:
            os.link(temporary, path)
        except FileExistsError:
            pass
        finally:
            temporary.unlink()
    secret = path.read_bytes()
    if len(secret) != 32:
        raise RuntimeError(f"{path} must hold exactly 32 bytes")
    return secret
