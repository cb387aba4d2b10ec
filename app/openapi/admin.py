"""The operator's routes under /admin, behind the admin key."""

from __future__ import annotations

from app.openapi.common import MODEL_ID, STATUS_OBJECT, Route
from app.routes.admin.keys import KeyChanges
from app.schemas.fairness import FairnessList
from app.schemas.prices import PriceChange

ADMIN_ERRORS = ("400", "401", "403")
KEY_ID = ("key_id", "path", {"type": "string"})

ROUTES = (
    Route(
        "get",
        "/admin/admission",
        "Admission state (admin key)",
        ok=STATUS_OBJECT,
        errors=("401", "403"),
    ),
    Route(
        "post",
        "/admin/admission/drain",
        "Stop lending until resumed (admin key)",
        ok=STATUS_OBJECT,
        errors=("401", "403"),
    ),
    Route(
        "post",
        "/admin/admission/resume",
        "Resume lending (admin key)",
        ok=STATUS_OBJECT,
        errors=("401", "403"),
    ),
    Route(
        "get",
        "/admin/models",
        "Served models: state, keep-alive, memory (admin key)",
        ok=STATUS_OBJECT,
        errors=("401", "403"),
    ),
    Route(
        "post",
        "/admin/models/{model_id}/sleep",
        "Put an idle model to sleep (admin key)",
        ok=STATUS_OBJECT,
        errors=("401", "403", "404", "409"),
        params=(MODEL_ID,),
    ),
    Route(
        "post",
        "/admin/models/{model_id}/wake",
        "Wake a model (admin key)",
        ok=STATUS_OBJECT,
        errors=("401", "403", "404", "503"),
        params=(MODEL_ID,),
    ),
    Route("get", "/admin/keys", "API keys (admin key)", ok=STATUS_OBJECT, errors=ADMIN_ERRORS),
    Route(
        "post",
        "/admin/keys",
        "Create an API key; its secret is returned once (admin key)",
        KeyChanges,
        STATUS_OBJECT,
        errors=ADMIN_ERRORS,
    ),
    Route(
        "patch",
        "/admin/keys/{key_id}",
        "Change a key's limits (admin key)",
        KeyChanges,
        STATUS_OBJECT,
        errors=(*ADMIN_ERRORS, "404"),
        params=(KEY_ID,),
    ),
    Route(
        "delete",
        "/admin/keys/{key_id}",
        "Revoke a key (admin key)",
        ok=STATUS_OBJECT,
        errors=(*ADMIN_ERRORS, "404"),
        params=(KEY_ID,),
    ),
    Route(
        "get",
        "/admin/batches",
        "Every key's batches, newest first, and this replica's runner (admin key)",
        ok=STATUS_OBJECT,
        errors=ADMIN_ERRORS,
        params=(
            ("status", "query", {"type": "string"}),
            ("after", "query", {"type": "string"}),
            ("limit", "query", {"type": "integer"}),
        ),
    ),
    Route(
        "get",
        "/admin/fairness",
        "Each model's tenants: engine service, weight, share of the last minute (admin key)",
        ok=FairnessList,
        errors=("401", "403", "404"),
        params=(("model", "query", {"type": "string"}),),
    ),
    Route(
        "get",
        "/admin/usage",
        "Usage by key, model, day or batch (admin key)",
        ok=STATUS_OBJECT,
        errors=ADMIN_ERRORS,
        params=(
            ("by", "query", {"type": "string", "enum": ["key", "model", "day", "batch"]}),
            ("since", "query", {"type": "string"}),
            ("until", "query", {"type": "string"}),
        ),
    ),
    Route(
        "get",
        "/admin/prices",
        "The models' prices in force (?all=true: every change) (admin key)",
        ok=STATUS_OBJECT,
        errors=ADMIN_ERRORS,
        params=(("all", "query", {"type": "boolean"}),),
    ),
    Route(
        "put",
        "/admin/prices/{model_id}",
        "Set a model's price per million tokens, from now or `effective_from` (admin key)",
        PriceChange,
        STATUS_OBJECT,
        errors=(*ADMIN_ERRORS, "404"),
        params=(MODEL_ID,),
    ),
)
