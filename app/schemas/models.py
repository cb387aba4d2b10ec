"""Wire types of GET /v1/models."""

from __future__ import annotations

from typing import Literal

from msgspec import Struct


class ModelCard(Struct):
    id: str
    created: int
    owned_by: str
    root: str
    max_model_len: int
    object: Literal["model"] = "model"


class ModelList(Struct):
    data: list[ModelCard]
    object: Literal["list"] = "list"
