"""The OpenAPI side of the API views (docs/design.md §7.3, §12.4): the error responses every
operation declares (:func:`errors`), the parameters several operations share, and the schema
class :class:`CortexAutoSchema` every view uses."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, cast

from django.db import connections, router
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    Direction,
    OpenApiParameter,
    OpenApiResponse,
    PolymorphicProxySerializer,
)

from cortex_sessions import search
from cortex_sessions.models import Session

from .consistency import ConsistencySchemaMixin
from .examples import with_pattern_examples
from .openapi import (
    SCOPE_DISAGREEMENT,
    bound_message_list,
    bound_request_field,
    json_query_parameters,
)
from .parsers import MERGE_PATCH_MEDIA_TYPE
from .scoping import SCOPE_HEADER, SCOPE_QUERY_PARAM
from .serializers import (
    SCOPE_PATTERN,
    ErrorSerializer,
    MessageInputSerializer,
    MetadataField,
    MetadataPatchField,
    StrictSerializerMixin,
)

__all__ = [
    "ARCHIVED_409",
    "BODY_ERRORS",
    "ID_PARAMETER",
    "IN_PROGRESS_409",
    "MAX_SEQ",
    "REFERENCE_ERROR_TEXT",
    "SCOPE_PARAMETERS",
    "SEARCH_503",
    "TOKEN_COUNTER_503",
    "TOKEN_COUNTER_TEXT",
    "CortexAutoSchema",
    "errors",
]

#: Largest ``seq`` accepted in a query (a signed 64-bit integer).
MAX_SEQ = 2**63 - 1

_ERROR_TEXT = {
    400: "Bad input: `invalid`, `parse_error`, `invalid_filter`, `invalid_scope` or a field code.",
    401: "Not authenticated (when the first authentication class sends WWW-Authenticate).",
    403: "`not_authenticated`, `authentication_failed`, `no_scope`, `scope_forbidden`, "
    "`permission_denied`.",
    404: "`session_not_found`: missing, out of scope or malformed id, all alike.",
    406: "`not_acceptable`: no renderer matches the Accept header.",
    413: "`message_too_large` or `request_too_large`.",
    415: "`unsupported_media_type`: send application/json (PATCH also takes "
    "application/merge-patch+json).",
    422: "`idempotency_key_reused`: the Idempotency-Key was used with another body.",
    503: "`database_unavailable` (with Retry-After): a transient database fault rolled the "
    "request back; nothing was written. `write_outcome_unknown` (with Retry-After): the "
    "connection failed while the write was committed, so it may be stored; retry with the same "
    "Idempotency-Key, or read back first.",
}

#: The 503 of an endpoint that searches messages (``q``; docs/design.md §11.5).
SEARCH_503 = {
    503: _ERROR_TEXT[503] + " `search_timeout` (with Retry-After): a message search (`q`) ran "
    "past the server's SEARCH_TIMEOUT and was cancelled; narrow it or retry later.",
}

#: What a write that counts tokens (an append, a compaction) adds to its 503 (§16.2).
TOKEN_COUNTER_TEXT = (
    " `token_counter_failed` (with Retry-After): the server's TOKEN_COUNTER failed counting a "
    "message's tokens; nothing was written, send the request again later."
)

#: The 503 of an endpoint that writes messages, so counts their tokens (docs/design.md §16.2).
TOKEN_COUNTER_503 = _ERROR_TEXT[503] + TOKEN_COUNTER_TEXT

#: Error descriptions of the session-reference endpoints (docs/design.md §8.8, §8.9).
REFERENCE_ERROR_TEXT = {
    400: "Bad input: `invalid`, `parse_error`, `invalid_scope`, a content code "
    "(`invalid_content`, `empty_content`, `nul_character`), or "
    "`SESSION_REFERENCE_INVALID_REFERENCE` (malformed mention or reference, or a referenced id "
    "that is not a UUID), "
    "`SESSION_REFERENCE_SELF_REFERENCE`, `SESSION_REFERENCE_TOO_MANY`.",
    404: "`session_not_found`: the session in the URL is missing, out of scope or malformed. "
    "`SESSION_REFERENCE_READ_FAILED`: a referenced session is missing or out of scope, alike.",
    413: "`SESSION_REFERENCE_BUDGET_EXCEEDED` (a snapshot cannot fit MAX_REFERENCE_BYTES), "
    "`message_too_large` or `request_too_large`.",
    500: "`SESSION_REFERENCE_INVALID_CONFIG`: the server's reference settings are invalid "
    "(not caused by the request).",
    503: "`SESSION_REFERENCE_CANCELLED`: preparing the references ran past the server's deadline; "
    "`database_unavailable` (with Retry-After): a transient database fault; "
    "`write_outcome_unknown` (with Retry-After): the connection failed while the write was "
    "committed, so it may be stored.",
}


#: The 409 of an operation that writes a session's messages or its default flag (§11.2).
ARCHIVED_409 = "`session_archived`: the session is archived (read-only); unarchive it first."

#: The 409 of every operation deleting a session or its messages (docs/design.md §18.1).
HELD_409 = "`legal_hold`: the session is on legal hold; nothing of it may be deleted."

#: The 409 of every operation taking an ``Idempotency-Key`` (§12.1): those declaring its 422.
IN_PROGRESS_409 = (
    "`idempotency_key_in_progress`: a request with the same Idempotency-Key was still running "
    "past the database's lock wait timeout; send it again later to get its answer."
)


def errors(*codes: int, text: Mapping[int, str] | None = None) -> dict[int, OpenApiResponse]:
    """OpenAPI error responses for ``codes`` plus those every endpoint may give; the 400
    states that a scope header and parameter that differ are ``invalid_scope``.

    Args:
        codes: statuses the endpoint may answer besides 400, 401, 403, 406 and 503.
        text: descriptions replacing the default ones, by status; a 409 has no default (each
            operation names its own conflict codes, e.g. :data:`ARCHIVED_409`).

    An operation declaring 422 (``idempotency_key_reused``) takes an ``Idempotency-Key``, so
    it also declares 409 ``idempotency_key_in_progress`` (:data:`IN_PROGRESS_409`, after the
    operation's own 409 text, if any).

    Raises:
        KeyError: a status without a description (a 409 not given in ``text``).
    """
    keyed = 422 in codes
    wanted = sorted({400, 401, 403, 406, 503, *codes, *((409,) if keyed else ())})
    descriptions = {**_ERROR_TEXT, **(text or {})}
    if keyed:
        descriptions[409] = " ".join(filter(None, [descriptions.get(409), IN_PROGRESS_409]))
    descriptions[400] += SCOPE_DISAGREEMENT  # every endpoint takes both (SCOPE_PARAMETERS)
    return {
        code: OpenApiResponse(ErrorSerializer, description=descriptions[code]) for code in wanted
    }


#: Errors of an operation that takes a request body.
BODY_ERRORS = (413, 415)

#: ``X-Cortex-Scope`` is a header, so its pattern keeps to visible ASCII (escape the rest).
_HEADER_SCOPE_LEVEL = r"[a-z][a-z0-9_.-]{0,63}=(?:[!-$&-.0-<>-~]|%25|%2F|%3D){1,255}"

SCOPE_PARAMETERS = [
    OpenApiParameter(
        SCOPE_QUERY_PARAM,
        {"type": "string", "minLength": 1, "maxLength": 1024, "pattern": SCOPE_PATTERN},
        OpenApiParameter.QUERY,
        description=(
            "Narrow the request's scope to this canonical scope, at or beneath the resolved "
            "one (403 `scope_forbidden` otherwise). An empty value is 400 `invalid_scope`, "
            "never 'not given'; leave the parameter out instead."
        ),
    ),
    OpenApiParameter(
        SCOPE_HEADER,
        {
            "type": "string",
            "minLength": 1,
            "maxLength": 1024,
            "pattern": rf"^{_HEADER_SCOPE_LEVEL}(?:/{_HEADER_SCOPE_LEVEL}){{0,2}}$",
        },
        OpenApiParameter.HEADER,
        description=(
            f"Same as the `{SCOPE_QUERY_PARAM}` parameter (empty: 400 `invalid_scope`); if "
            "both are sent they must be the same text, else 400 `invalid_scope`."
        ),
    ),
]

ID_PARAMETER = OpenApiParameter(
    "id",
    OpenApiTypes.UUID,
    OpenApiParameter.PATH,
    description="The session id. A missing, out-of-scope or malformed id is 404 alike.",
)


#: The alternative drf-spectacular adds to the schema of a blank-allowing string field.
_EMPTY_STRING_BRANCH = {"type": "string", "maxLength": 0}


def _takes_empty_string(schema: Mapping[str, Any]) -> bool:
    """Whether a string schema accepts ``""``: no ``format``, no ``minLength`` above 0, and a
    ``pattern`` (if any) that matches the empty string."""
    if schema.get("type") != "string" or "format" in schema or schema.get("minLength", 0) > 0:
        return False
    pattern = schema.get("pattern")
    try:
        return pattern is None or re.search(pattern, "") is not None
    except re.error:  # an ECMA-262 pattern Python cannot read: keep both branches
        return False


class CortexAutoSchema(ConsistencySchemaMixin, AutoSchema):
    """drf-spectacular's schema with the app's strictness stated (docs/design.md §12.4): a
    request body of a :class:`StrictSerializerMixin` serializer has
    ``additionalProperties: false``, since the server refuses undefined fields; a body of
    several shapes (a :class:`PolymorphicProxySerializer`) is required, as each shape is; and
    ``application/merge-patch+json`` is offered only where an operation names it (``PATCH
    /sessions/{id}/``), since every other endpoint answers it with 415; a response field a
    serializer lists in ``optional_fields`` (``match``, only in search results) is not
    required; the message search ``q`` is offered only where the database searches; and a
    blank-allowing string whose schema already takes ``""`` is one schema, not a ``oneOf`` of
    two branches that both match ``""`` (which would make ``""`` invalid); a query parameter
    holding a JSON object is ``content: application/json``; and the bounds of one request's
    work are stated (``maxItems`` of a list of messages, ``maxProperties`` of a metadata
    object; :mod:`cortex_sessions.api.openapi`); and every string with a ``pattern``, in a
    serializer or a parameter, has an ``example`` the server accepts
    (:func:`~cortex_sessions.api.examples.with_pattern_examples`)."""

    def _unwrap_list_serializer(
        self, serializer: Any, direction: Direction
    ) -> dict[str, Any] | None:
        """A list serializer's array schema, with ``minItems: 1`` when the list may not be
        empty (``allow_empty=False``: a list of messages, which an empty one is 400
        ``empty``)."""
        schema: dict[str, Any] | None = super()._unwrap_list_serializer(serializer, direction)
        if schema is not None and getattr(serializer, "allow_empty", True) is False:
            schema["minItems"] = 1
        child = getattr(serializer, "child", None)
        if schema is not None and isinstance(child, MessageInputSerializer):
            bound_message_list(schema)
        return schema

    def _map_serializer_field(
        self, field: Any, direction: Any, bypass_extensions: bool = False
    ) -> dict[str, Any]:
        """drf-spectacular's field schema; a metadata object in a request with
        ``maxProperties: MAX_JSON_KEYS``."""
        schema: dict[str, Any] = super()._map_serializer_field(  # type: ignore[no-untyped-call]
            field, direction, bypass_extensions
        )
        stored_object = isinstance(field, MetadataField | MetadataPatchField)
        return bound_request_field(schema, json_object=direction == "request" and stored_object)

    def _insert_field_validators(self, field: Any, schema: dict[str, Any]) -> None:
        """drf-spectacular's validators, without an empty-string alternative that overlaps.

        For a string field with ``allow_blank`` and a ``pattern``, drf-spectacular writes
        ``oneOf: [<the field's schema>, {"type": "string", "maxLength": 0}]`` so that ``""``
        passes a pattern that would refuse it. When the field's schema takes ``""`` already
        (``title``, ``cwd``: ``^[^\\u0000]*$``), both branches match ``""``, and by ``oneOf``
        (exactly one) ``""`` is then invalid although the server accepts it: the schema would
        lie. Such a ``oneOf`` is replaced by the field's schema itself.
        """
        super()._insert_field_validators(field, schema)  # type: ignore[no-untyped-call]
        branches = schema.get("oneOf")
        if (
            isinstance(branches, list)
            and len(branches) == 2
            and branches[1] == _EMPTY_STRING_BRANCH
            and _takes_empty_string(branches[0])
        ):
            del schema["oneOf"]
            schema.update(branches[0])

    def _map_basic_serializer(self, serializer: Any, direction: str) -> dict[str, Any]:
        schema: dict[str, Any] = super()._map_basic_serializer(  # type: ignore[no-untyped-call]
            serializer, direction
        )
        if direction == "request" and isinstance(serializer, StrictSerializerMixin):
            schema["additionalProperties"] = False
        optional = getattr(serializer, "optional_fields", ())
        if direction == "response" and optional and "required" in schema:
            schema["required"] = [name for name in schema["required"] if name not in optional]
        return cast(dict[str, Any], with_pattern_examples(schema))

    def _get_parameters(self) -> list[dict[str, Any]]:
        """The operation's parameters, a JSON object one as ``content: application/json``
        (:func:`~cortex_sessions.api.openapi.json_query_parameters`), a patterned one with
        an ``example`` (:func:`~cortex_sessions.api.examples.with_pattern_examples`), without the message
        search ``q`` where the database has no search (MySQL/MariaDB answer it 400
        ``invalid_filter``, so a client generated from the schema never sends it;
        docs/design.md §11.5, §15)."""
        parameters: list[dict[str, Any]] = [
            {**parameter, "schema": with_pattern_examples(parameter["schema"], parameter["name"])}
            if "schema" in parameter
            else parameter
            for parameter in json_query_parameters(super()._get_parameters())
        ]
        if search.search_available(connections[router.db_for_read(Session, scope=None)]):
            return parameters
        return [
            parameter
            for parameter in parameters
            if not (
                parameter.get("name") == "q"
                and parameter.get("schema", {}).get("pattern") == search.QUERY_PATTERN
            )
        ]

    def map_parsers(self) -> list[Any]:
        """The request media types of an operation that does not name its own: the view's
        parsers but the merge patch one."""
        return [media for media in super().map_parsers() if media != MERGE_PATCH_MEDIA_TYPE]

    def _get_request_for_media_type(
        self, serializer: Any, direction: str = "request"
    ) -> tuple[Any, bool]:
        schema, required = super()._get_request_for_media_type(  # type: ignore[no-untyped-call]
            serializer, direction
        )
        if isinstance(serializer, PolymorphicProxySerializer):
            required = True
        return schema, required
