"""The OpenAPI 3.1 document: one module per API's route table, and the builder."""

from app.openapi.builder import ROUTES, document, openapi_json
from app.openapi.common import Route

__all__ = ["ROUTES", "Route", "document", "openapi_json"]
