"""Model families, keyed by the names users type (`--family`, the vLLM parser names).

To add a family: write `engine/families/<name>.py` with a `FAMILY` record, its template
in `templates/<name>.jinja`, list it in `_MODULES`, and add its rows to docs/api/reasoning.md.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from engine.families import gemma4, glm, kimi_k2, minimax_m3, smollm2
from engine.families.base import Family, Toggle, resolve

_MODULES = (smollm2, kimi_k2, glm, gemma4, minimax_m3)
FAMILIES: dict[str, Family] = {m.FAMILY.name: m.FAMILY for m in _MODULES}

logger = logging.getLogger(__name__)

__all__ = ["FAMILIES", "Family", "Toggle", "detect", "for_model", "get", "resolve"]


def get(name: str) -> Family:
    """The family called `name`; a ValueError listing the known names otherwise."""
    family = FAMILIES.get(name)
    if family is None:
        known = ", ".join(sorted(FAMILIES))
        raise ValueError(f"unknown model family {name!r}; known families: {known}")
    return family


def detect(model_id: str, config: Mapping[str, Any] | None = None) -> Family | None:
    """The family a model belongs to, from its id (or folder) and its HF config.

    The id is tried first: fine-tunes keep the base id in their names more reliably
    than a config keeps its model type (SmolLM2's says only `llama`). A family binds only
    the versions its template was checked against; another version of the same lineage
    (GLM-4.6 beside GLM 5.2) binds to nothing, with a warning.
    """
    lowered = model_id.lower()
    for family in FAMILIES.values():
        if any(pattern in lowered for pattern in family.name_patterns):
            return family
    for family in FAMILIES.values():
        if any(pattern in lowered for pattern in family.other_versions):
            # A sibling version writes a different prompt: guessing would mistrain it.
            logger.warning(
                "%s looks like a version of the %s family that has no template here; "
                "using the checkpoint's own chat template (--family %s forces ours)",
                model_id,
                family.name,
                family.name,
            )
            return None
    if config:
        model_type = str(config.get("model_type", "")).lower()
        for family in FAMILIES.values():
            if model_type in family.model_types:
                return family
    return None


def for_model(model: str, explicit: str | None = None) -> Family | None:
    """The family a served model binds to: `explicit` (`--family`) if given, else the one
    detected from the model's id and, for a local folder, its `config.json`."""
    if explicit:
        return get(explicit)
    config_path = Path(model) / "config.json"
    config: dict[str, Any] | None = None
    if config_path.is_file():
        try:
            config = json.loads(config_path.read_text())
        except ValueError:
            config = None
    return detect(model, config)
