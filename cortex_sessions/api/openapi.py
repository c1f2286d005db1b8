"""What the OpenAPI schema states beyond drf-spectacular's defaults (docs/design.md §12.4, §12.6).

Pure functions over the schema fragments drf-spectacular builds, called by the views' schema
class (:class:`cortex_sessions.api.schema.CortexAutoSchema`):

- :func:`json_query_parameters`: a query parameter that carries a JSON object (the ``metadata``
  list filter) is described by ``content: application/json`` and the object's schema, not as
  a ``string`` that also admits text the server refuses;
- :func:`bound_request_field` and :func:`bound_message_list`: the bounds of one request's work
  (``MAX_JSON_KEYS``, ``MAX_MESSAGES_PER_APPEND``), read from the settings when the schema is
  generated, so the schema states the server's current limits;
- :data:`SCOPE_DISAGREEMENT`: the 400 of a request whose ``X-Cortex-Scope`` header and
  ``scope`` parameter name different scopes, a rule across two parameters that a schema can
  only state in words.
"""

from __future__ import annotations

from typing import Any

from cortex_sessions.conf import app_settings

__all__ = [
    "JSON_MEDIA_TYPE",
    "SCOPE_DISAGREEMENT",
    "bound_message_list",
    "bound_request_field",
    "json_query_parameters",
]

JSON_MEDIA_TYPE = "application/json"

#: Appended to the description of every operation's 400 response.
SCOPE_DISAGREEMENT = (
    " `invalid_scope` also when the `X-Cortex-Scope` header and the `scope` parameter are "
    "both sent and differ (each alone may be valid)."
)


def json_query_parameters(parameters: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``parameters`` with every query parameter whose schema is an object described as JSON
    text: ``content: {"application/json": {"schema": <the object's schema>}}`` in place of
    ``schema`` (OpenAPI 3.0 §4.7.12), so a client generated from the schema serializes the
    object as JSON, and a schema-valid value is an object the server takes — not any string
    (``format: json`` did not say "an object", and ``?metadata=h`` was schema-valid). Its
    ``example`` is ``{}``, which filters nothing: Swagger UI fills a parameter in with its
    example, and without one with an object drawn from the schema (``{"additionalProp1": {}}``),
    which would have emptied every list it sent.

    Args:
        parameters: an operation's parameter objects (dicts), as drf-spectacular built them.

    Returns:
        A new list; the other parameters unchanged (the same objects).
    """
    described: list[dict[str, Any]] = []
    for parameter in parameters:
        schema = parameter.get("schema")
        if (
            parameter.get("in") == "query"
            and isinstance(schema, dict)
            and schema.get("type") == "object"
        ):
            parameter = {
                key: value
                for key, value in parameter.items()
                if key not in ("schema", "style", "explode")
            }
            parameter["content"] = {JSON_MEDIA_TYPE: {"schema": schema, "example": {}}}
        described.append(parameter)
    return described


def bound_request_field(schema: dict[str, Any], *, json_object: bool) -> dict[str, Any]:
    """A request field's schema with ``maxProperties: MAX_JSON_KEYS`` when the field holds a
    JSON object the app stores (``metadata``, a merge patch's ``metadata``): more keys are 400
    ``too_many_keys`` (docs/design.md §12.6). Objects nested inside it follow the same rule,
    which OpenAPI 3.0 cannot state for free-form JSON (a stated gap, §12.4).

    Args:
        schema: the field's schema (not modified).
        json_object: whether the field holds such an object.

    Returns:
        ``schema`` itself, or a copy with the bound.
    """
    if not json_object or schema.get("type") != "object":
        return schema
    return {**schema, "maxProperties": app_settings.MAX_JSON_KEYS}


def bound_message_list(schema: dict[str, Any]) -> dict[str, Any]:
    """A list-of-messages body's schema with ``maxItems: MAX_MESSAGES_PER_APPEND`` (more are 400
    ``too_many_messages``, docs/design.md §12.6).

    Args:
        schema: the array schema (modified in place).

    Returns:
        ``schema``.
    """
    schema["maxItems"] = app_settings.MAX_MESSAGES_PER_APPEND
    return schema
