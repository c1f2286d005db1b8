"""Viewsets of the API (docs/design.md §7.3). Every view calls :mod:`cortex_sessions.services`.

The viewsets set their permission, pagination, filter and parser classes and their exception
handler explicitly, so a host's global DRF settings (``AllowAny``, no pagination, another error
format) never change this API. Authentication and rendering are the host's.

Not found, out of scope and malformed ids are one case: 404 ``session_not_found`` with the same
body, on every endpoint and method (docs/design.md §7.3).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

from django.db import connections, router
from django.http import Http404
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    Direction,
    OpenApiParameter,
    OpenApiResponse,
    PolymorphicProxySerializer,
    extend_schema,
)
from rest_framework import status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ErrorDetail, MethodNotAllowed, UnsupportedMediaType
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.utils.urls import replace_query_param

from cortex_sessions import search, services
from cortex_sessions.conf import DEFAULTS, app_settings
from cortex_sessions.exceptions import MessageNotFound, SessionNotFound
from cortex_sessions.models import Message, Session
from cortex_sessions.references import Deadline
from cortex_sessions.references import service as references
from cortex_sessions.scope import Scope
from cortex_sessions.search_limits import search_timeout

from .authentication import authenticate
from .exceptions import InvalidQuery, ReferencesNotAllowed, exception_handler
from .filters import (
    SEARCH_QUERY_HELP,
    SEARCH_QUERY_SCHEMA,
    SessionFilter,
    SessionFilterBackend,
    parse_search_query,
    text_param,
)
from .idempotency import IDEMPOTENCY_PARAMETER, idempotent
from .openapi import (
    SCOPE_DISAGREEMENT,
    bound_message_list,
    bound_request_field,
    json_query_parameters,
)
from .pagination import SessionPagination, parse_int_param
from .parsers import MERGE_PATCH_MEDIA_TYPE, JSONObjectParser, MergePatchParser
from .permissions import HasCortexScope
from .scoping import SCOPE_HEADER, SCOPE_QUERY_PARAM, narrow_scope
from .serializers import (
    NO_NUL_PATTERN,
    SCOPE_PATTERN,
    CountSerializer,
    ErrorSerializer,
    ForkSerializer,
    ListedSessionSerializer,
    MessageAppendResultSerializer,
    MessageInputSerializer,
    MessagePageSerializer,
    MessagesDeletedSerializer,
    MessageWithReferencesInputSerializer,
    MetadataField,
    MetadataPatchField,
    PoppedMessageSerializer,
    PreparedReferencesSerializer,
    ReferenceCandidateListSerializer,
    ReferencePrepareSerializer,
    ResolveSerializer,
    SessionCreateSerializer,
    SessionMergePatchSerializer,
    SessionSerializer,
    SessionUpdateSerializer,
    StrictSerializerMixin,
    message_list_data,
    refuse_body,
)

__all__ = ["CortexAPIMixin", "SessionViewSet"]

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
_SEARCH_503 = {
    503: _ERROR_TEXT[503] + " `search_timeout` (with Retry-After): a message search (`q`) ran "
    "past the server's SEARCH_TIMEOUT and was cancelled; narrow it or retry later.",
}

#: Error descriptions of the session-reference endpoints (docs/design.md §8.8, §8.9).
_REFERENCE_ERROR_TEXT = {
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


_BODY_ERRORS = (413, 415)

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

CANDIDATE_PARAMETERS = [
    ID_PARAMETER,
    OpenApiParameter(
        "q",
        {"type": "string", "maxLength": 500, "pattern": NO_NUL_PATTERN},
        OpenApiParameter.QUERY,
        description=(
            "Case-insensitive substring of a session's id, cwd or title (never message text); "
            "surrounding whitespace ignored; empty matches every session."
        ),
    ),
    OpenApiParameter(
        "limit",
        {"type": "integer", "minimum": 1, "maximum": MAX_SEQ},
        OpenApiParameter.QUERY,
        description=(
            "Most candidates returned; default CANDIDATE_LIMIT, and a larger value is "
            "lowered to it."
        ),
    ),
]

#: Longest ``q`` accepted by the candidates endpoint (the longest title).
MAX_CANDIDATE_QUERY = 500

MESSAGE_PAGE_PARAMETERS = [
    ID_PARAMETER,
    OpenApiParameter(
        "limit",
        {"type": "integer", "minimum": 1, "maximum": DEFAULTS["MAX_PAGE_SIZE"]},
        OpenApiParameter.QUERY,
        description=(
            "Messages per page, 1 to MAX_PAGE_SIZE (the schema states the default maximum); "
            "default PAGE_SIZE."
        ),
    ),
    OpenApiParameter(
        "after_seq",
        {"type": "integer", "minimum": 0, "maximum": MAX_SEQ},
        OpenApiParameter.QUERY,
        description="Read forward: the oldest `limit` messages with a greater seq.",
    ),
    OpenApiParameter(
        "before_seq",
        {"type": "integer", "minimum": 0, "maximum": MAX_SEQ},
        OpenApiParameter.QUERY,
        description="Read backward: the newest `limit` messages with a smaller seq.",
    ),
    OpenApiParameter(
        "q",
        SEARCH_QUERY_SCHEMA,
        OpenApiParameter.QUERY,
        description=(
            f"{SEARCH_QUERY_HELP}. Only the matching messages, paged as without it "
            "(chronological), each with `match` (snippet, seq, rank). PostgreSQL: full-text "
            "search, websearch syntax; SQLite: case-insensitive substring; MySQL/MariaDB: 400 "
            "`invalid_filter`."
        ),
    ),
]


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


class CortexAutoSchema(AutoSchema):
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
    object; :mod:`cortex_sessions.api.openapi`)."""

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
        return schema

    def _get_parameters(self) -> list[dict[str, Any]]:
        """The operation's parameters, a JSON object one as ``content: application/json``
        (:func:`~cortex_sessions.api.openapi.json_query_parameters`), without the message
        search ``q`` where the database has no search (MySQL/MariaDB answer it 400
        ``invalid_filter``, so a client generated from the schema never sends it;
        docs/design.md §11.5, §15)."""
        parameters: list[dict[str, Any]] = json_query_parameters(super()._get_parameters())
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


if TYPE_CHECKING:
    _ViewBase = viewsets.GenericViewSet[Any]
else:  # a mixin; the view set it is mixed into brings DRF's behaviour
    _ViewBase = object


class CortexAPIMixin(_ViewBase):
    """Policies every cortex_sessions view sets for itself, independent of the host's defaults:
    the scope permission, the strict JSON parser, the app's exception handler, and strict query
    parameters (docs/design.md §12.4).

    A query parameter the action does not define is 400 ``invalid_filter`` naming it (code
    ``unknown_parameter`` under its name), so a misspelled filter never answers as if no filter
    had been given. Every action takes ``scope`` and DRF's ``format``; the others are listed in
    :attr:`query_parameters` under ``"<action>.<method>"`` (e.g. ``"messages.get"``) or, for
    every method, ``"<action>"``. To give an action a parameter, add its name there — one line.
    """

    permission_classes = [HasCortexScope]
    parser_classes = [JSONObjectParser]
    schema = CortexAutoSchema()
    #: Query parameters by action (``"<action>"`` or ``"<action>.<method>"``), besides
    #: :attr:`common_query_parameters`.
    query_parameters: Mapping[str, frozenset[str]] = {}
    #: Query parameters every action takes.
    common_query_parameters = frozenset({SCOPE_QUERY_PARAM, "format"})

    def allowed_query_parameters(self) -> frozenset[str]:
        """The query parameters the current action and method take."""
        action = getattr(self, "action", None) or ""
        method = (self.request.method or "").lower()
        extra = self.query_parameters.get(f"{action}.{method}", self.query_parameters.get(action))
        return self.common_query_parameters | (extra or frozenset())

    def check_query_parameters(self, request: Request) -> None:
        """Refuse the query parameters the action does not define, and any parameter given
        more than once (every parameter takes one value).

        Raises:
            InvalidQuery: 400 ``invalid_filter``, one ``unknown_parameter`` error per undefined
                name, else one ``repeated_parameter`` error per repeated name.
        """
        if request.method == "OPTIONS":
            return
        unknown = sorted(set(request.query_params) - self.allowed_query_parameters())
        if unknown:
            raise InvalidQuery.naming(unknown, "Unknown query parameter.", "unknown_parameter")
        repeated = sorted(name for name, values in request.query_params.lists() if len(values) > 1)
        if repeated:
            raise InvalidQuery.repeated(repeated)

    def perform_authentication(self, request: Request) -> None:
        """DRF's authentication, refusing credentials no database can be asked about (a NUL
        byte) as 401/403 ``authentication_failed``: see
        :func:`cortex_sessions.api.authentication.authenticate`."""
        authenticate(request)

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        """The method first, then DRF's checks (authentication, permissions, throttles), then
        the query parameters.

        Raises:
            MethodNotAllowed: the endpoint does not declare the request's method: 405
                ``method_not_allowed`` with ``Allow``, whatever else is wrong with the request
                (a bad scope, no credentials), so a client learns what it can fix first
                (docs/design.md §7.3).
        """
        method = (request.method or "").lower()
        if method not in self.http_method_names or not hasattr(self, method):
            raise MethodNotAllowed(request.method or "")
        super().initial(request, *args, **kwargs)
        self.check_query_parameters(request)

    def get_exception_handler(self) -> Any:
        """The app's handler (``{"code", "detail"}`` bodies), never the host's global one."""
        return exception_handler

    @property
    def scope(self) -> Scope:
        """The request's scope, resolved (and possibly narrowed) by ``HasCortexScope``."""
        scope: Scope = cast(Any, self.request).cortex_scope  # set by HasCortexScope
        return scope


@extend_schema(tags=["sessions"], parameters=SCOPE_PARAMETERS)
class SessionViewSet(CortexAPIMixin, viewsets.GenericViewSet[Session]):
    """Sessions and their messages at the request's scope (docs/design.md §7.3)."""

    queryset = Session.objects.none()  # schema introspection only; rows come from services
    serializer_class = SessionSerializer
    pagination_class = SessionPagination
    filter_backends = [SessionFilterBackend]
    filterset_class = SessionFilter
    parser_classes = [JSONObjectParser, MergePatchParser]
    lookup_value_regex = "[^/]+"  # any id reaches the view, so a malformed one is a JSON 404
    #: Seconds one request may spend preparing session references; ``None`` (the default)
    #: means no limit. Past it the request fails with 503 ``SESSION_REFERENCE_CANCELLED``
    #: (docs/design.md §8.9). Set it on a subclass mounted by the host.
    reference_timeout: float | None = None
    query_parameters = {
        "list": frozenset({*SessionFilter.base_filters, "limit", "offset", "cursor"}),
        "count": frozenset(SessionFilter.base_filters),
        "messages.get": frozenset({"limit", "after_seq", "before_seq", "q"}),
        "messages.delete": frozenset({"after_seq"}),
        "reference_candidates": frozenset({"q", "limit"}),
    }

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        """DRF's checks, plus: a merge-patch body is only for ``PATCH /sessions/{id}/``.

        Raises:
            UnsupportedMediaType: ``application/merge-patch+json`` sent to another endpoint.
        """
        super().initial(request, *args, **kwargs)
        if _is_merge_patch(request) and self.action != "partial_update":
            raise UnsupportedMediaType(MERGE_PATCH_MEDIA_TYPE)

    def get_queryset(self) -> Any:
        """The sessions at and beneath the request's scope (none before it is resolved)."""
        scope = getattr(self.request, "cortex_scope", None)
        if scope is None:
            return Session.objects.none()
        return services.session_queryset(scope=scope)

    def get_object(self) -> Session:
        """The session named in the URL, through the service (used only by DRF's own machinery:
        ``OPTIONS`` metadata and the browsable API's forms; our actions call services directly).

        Raises:
            Http404: missing, out of scope or malformed id.
        """
        try:
            return services.get_session(scope=self.scope, session_id=self.kwargs["pk"])
        except SessionNotFound:
            raise Http404 from None

    def get_serializer_class(self) -> Any:
        """The input serializer of the action (used by the browsable API's forms)."""
        return {
            "create": SessionCreateSerializer,
            "update": SessionUpdateSerializer,
            "partial_update": SessionUpdateSerializer,
            "resolve": ResolveSerializer,
            "fork": ForkSerializer,
            "messages": MessageWithReferencesInputSerializer,
            "prepare_references": ReferencePrepareSerializer,
        }.get(self.action, SessionSerializer)

    def _session_response(self, session: Session, code: int = status.HTTP_200_OK) -> Response:
        return Response(SessionSerializer(session).data, status=code)

    # -- collection -------------------------------------------------------------------------------

    @extend_schema(
        summary="List sessions",
        responses={200: ListedSessionSerializer(many=True), **errors(text=_SEARCH_503)},
    )
    def list(self, request: Request) -> Response:
        """A page of sessions, filtered and ordered (``{count, next, previous, results}``);
        with ``q``, the sessions matching a message search, each with ``match``
        (docs/design.md §11.5).

        Errors: 400 ``invalid_filter`` for a bad parameter (``q`` on MySQL/MariaDB too);
        400/403 scope errors; 503 ``search_timeout`` past ``SEARCH_TIMEOUT``.
        """
        queryset = self.filter_queryset(self.get_queryset())
        # With q (validated by the filter) the count and the page are search statements.
        with search_timeout(queryset.db, active="q" in request.query_params):
            page = self.paginate_queryset(queryset)
        return self.get_paginated_response(ListedSessionSerializer(page, many=True).data)

    @extend_schema(
        summary="Create a session",
        parameters=[IDEMPOTENCY_PARAMETER],
        request=SessionCreateSerializer,
        responses={201: SessionSerializer, **errors(422, *_BODY_ERRORS)},
    )
    @idempotent
    def create(self, request: Request) -> Response:
        """Create a session at the request's scope, or at a narrower ``scope`` from the body.

        Errors: 400 validation (``invalid``, ``invalid_agent_id``, ``invalid_metadata``, …);
        400 ``invalid_scope``; 403 ``scope_forbidden`` for a body scope outside the request's.
        """
        serializer = SessionCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = dict(serializer.validated_data)
        scope = self.scope
        if "scope" in data:
            scope = narrow_scope(scope, data.pop("scope"), field="scope")
        session = services.create_session(scope=scope, **data)
        return self._session_response(session, status.HTTP_201_CREATED)

    @extend_schema(
        summary="Count sessions",
        filters=True,
        responses={200: CountSerializer, **errors(text=_SEARCH_503)},
    )
    @action(detail=False, methods=["get"])
    def count(self, request: Request) -> Response:
        """``{"count": n}`` for the same filters as the list (``ordering`` is accepted and
        ignored). Errors as the list."""
        filterset = SessionFilterBackend().get_validated_filterset(
            request, self.get_queryset(), self
        )
        total = services.count_sessions(scope=self.scope, filters=filterset.session_filters)
        return Response({"count": total})

    @extend_schema(
        summary="Resolve the session a run uses",
        request=ResolveSerializer,
        responses={
            200: OpenApiResponse(SessionSerializer, description="An existing session."),
            201: OpenApiResponse(SessionSerializer, description="The default was just created."),
            **errors(
                404,
                409,
                *_BODY_ERRORS,
                text={
                    409: "`default_conflict`: every retry collided with a concurrent create "
                    "of the default that was deleted again (a resolve/delete storm); safe to "
                    "retry."
                },
            ),
        },
    )
    @action(detail=False, methods=["post"])
    def resolve(self, request: Request) -> Response:
        """The agent's default session at exactly the request's scope, created on first use,
        or the given ``session_id`` if it is the agent's and in scope (docs/design.md §6.1).

        Returns 201 when the default was created, else 200. Errors: 404 ``session_not_found``;
        409 ``default_conflict`` under a resolve/delete storm (docs/design.md §12.3).
        """
        serializer = ResolveSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        session, created = services.resolve_session(
            scope=self.scope,
            agent_id=serializer.validated_data["agent_id"],
            session_id=serializer.validated_data.get("session_id"),
        )
        return self._session_response(
            session, status.HTTP_201_CREATED if created else status.HTTP_200_OK
        )

    # -- one session ------------------------------------------------------------------------------

    @extend_schema(
        summary="Get a session",
        parameters=[ID_PARAMETER],
        responses={200: SessionSerializer, **errors(404)},
    )
    def retrieve(self, request: Request, pk: str) -> Response:
        """The session. Errors: 404 ``session_not_found``."""
        return self._session_response(services.get_session(scope=self.scope, session_id=pk))

    @extend_schema(
        summary="Replace a session's title, metadata and cwd",
        parameters=[ID_PARAMETER],
        request=SessionUpdateSerializer,
        responses={200: SessionSerializer, **errors(404, *_BODY_ERRORS)},
    )
    def update(self, request: Request, pk: str, partial: bool = False) -> Response:
        """Change ``title``, ``metadata`` and ``cwd``; other keys are ignored (read-only).

        Errors: 400 validation; 404 ``session_not_found``.
        """
        serializer = SessionUpdateSerializer(data=request.data, partial=partial)
        serializer.is_valid(raise_exception=True)
        session = services.update_session(
            scope=self.scope, session_id=pk, **serializer.validated_data
        )
        return self._session_response(session)

    @extend_schema(
        summary="Change a session's title, metadata or cwd",
        description=(
            "With `Content-Type: application/json` the fields sent replace the stored ones "
            "(`metadata` as a whole). With `Content-Type: application/merge-patch+json` the "
            "body is a JSON Merge Patch (RFC 7386): `metadata` is merged into the stored "
            "object under the session's row lock (a `null` member deletes that key, "
            '`"metadata": null` empties it), so concurrent patches of different keys all '
            "survive."
        ),
        parameters=[ID_PARAMETER],
        request={
            "application/json": SessionUpdateSerializer,
            MERGE_PATCH_MEDIA_TYPE: SessionMergePatchSerializer,
        },
        responses={200: SessionSerializer, **errors(404, *_BODY_ERRORS)},
    )
    def partial_update(self, request: Request, pk: str) -> Response:
        """As :meth:`update`, fields left out kept; or a JSON Merge Patch (§11.3).

        Errors: 400 validation (``invalid``, ``invalid_metadata`` for a metadata member that is
        neither an object nor null, …); 404 ``session_not_found``.
        """
        if not _is_merge_patch(request):
            return self.update(request, pk, partial=True)
        serializer = SessionMergePatchSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        patch = {name: request.data[name] for name in serializer.validated_data}
        return self._session_response(
            services.patch_session(scope=self.scope, session_id=pk, patch=patch)
        )

    @extend_schema(
        summary="Delete a session and its messages",
        parameters=[ID_PARAMETER],
        responses={204: OpenApiResponse(description="Deleted."), **errors(404)},
    )
    def destroy(self, request: Request, pk: str) -> Response:
        """Delete the session with its messages (deleting the default is allowed, §6.3).

        Errors: 404 ``session_not_found``.
        """
        services.delete_session(scope=self.scope, session_id=pk)
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(
        summary="Make a session its agent's default",
        parameters=[ID_PARAMETER],
        request=None,
        responses={
            200: SessionSerializer,
            **errors(
                404,
                409,
                text={
                    409: f"{ARCHIVED_409} `default_conflict`: a concurrent make-default "
                    "outlasted every retry; safe to retry."
                },
            ),
        },
    )
    @action(detail=True, methods=["post"], url_path="make-default")
    def make_default(self, request: Request, pk: str) -> Response:
        """Promote the session and demote the old default in one transaction (docs/design.md §6.2).

        Errors: 404 ``session_not_found``; 409 ``default_conflict`` under a swap storm,
        ``session_archived`` for an archived session.
        """
        refuse_body(request)
        return self._session_response(services.make_default(scope=self.scope, session_id=pk))

    # -- lifecycle (docs/design.md §11.1, §11.2) --------------------------------------------------

    @extend_schema(
        summary="Fork a session",
        description=(
            "A new session at the source's scope, for the source's agent, never the default, "
            "holding a copy of the source's messages with seq <= `up_to_seq` (all when "
            "omitted), renumbered 1..n. `forked_from` and `forked_at_seq` record where it "
            "came from. Archived sources can be forked; the fork is live."
        ),
        parameters=[ID_PARAMETER, IDEMPOTENCY_PARAMETER],
        request=ForkSerializer,
        responses={
            201: SessionSerializer,
            **errors(
                404,
                422,
                *_BODY_ERRORS,
                text={
                    400: "`invalid_up_to_seq` (not an integer from 0 to the source's last "
                    "seq), `invalid_metadata`, `too_long`, `invalid`, `parse_error`."
                },
            ),
        },
    )
    @action(detail=True, methods=["post"])
    @idempotent
    def fork(self, request: Request, pk: str) -> Response:
        """Fork the session (docs/design.md §11.1); 201 with the new session. Honours
        ``Idempotency-Key`` (docs/design.md §12.1): a replay returns the first fork.

        Errors: 400 ``invalid_up_to_seq`` and validation; 404 ``session_not_found``; 422
        ``idempotency_key_reused``.
        """
        serializer = ForkSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        session = services.fork_session(
            scope=self.scope,
            session_id=pk,
            up_to_seq=data.get("up_to_seq"),
            title=data.get("title"),
            metadata=data.get("metadata"),
        )
        return self._session_response(session, status.HTTP_201_CREATED)

    @extend_schema(
        summary="Archive a session",
        description=(
            "The session becomes read-only (appends, message deletes and make-default answer "
            "409 `session_archived`) and is hidden from lists unless `archived=true|any`. An "
            "archived default is demoted in the same transaction. Archiving twice changes "
            "nothing."
        ),
        parameters=[ID_PARAMETER],
        request=None,
        responses={200: SessionSerializer, **errors(404)},
    )
    @action(detail=True, methods=["post"])
    def archive(self, request: Request, pk: str) -> Response:
        """Archive the session (docs/design.md §11.2). Errors: 404 ``session_not_found``."""
        refuse_body(request)
        return self._session_response(services.archive_session(scope=self.scope, session_id=pk))

    @extend_schema(
        summary="Unarchive a session",
        description="The session is live again (not the default). Unarchiving twice changes "
        "nothing.",
        parameters=[ID_PARAMETER],
        request=None,
        responses={200: SessionSerializer, **errors(404)},
    )
    @action(detail=True, methods=["post"])
    def unarchive(self, request: Request, pk: str) -> Response:
        """Unarchive the session (docs/design.md §11.2). Errors: 404 ``session_not_found``."""
        refuse_body(request)
        return self._session_response(services.unarchive_session(scope=self.scope, session_id=pk))

    # -- messages ---------------------------------------------------------------------------------

    @extend_schema(
        methods=["GET"],
        summary="Read a page of messages",
        parameters=MESSAGE_PAGE_PARAMETERS,
        request=None,
        responses={200: MessagePageSerializer, **errors(404, text=_SEARCH_503)},
    )
    @extend_schema(
        methods=["POST"],
        summary="Append one message or a list of messages",
        description=(
            "A single message may set `resolve_references: true` (role `user` only): its "
            "session mentions are parsed, the referenced sessions (and any explicit "
            "`references`) prepared, and the readable message stored followed by its "
            "`session-reference` context message, in one transaction (docs/design.md §8.8). "
            "`resolve_references` or `references` elsewhere is 400 `references_not_allowed`."
        ),
        parameters=[ID_PARAMETER, IDEMPOTENCY_PARAMETER],
        request=PolymorphicProxySerializer(
            component_name="MessageInputOrList",
            serializers=[
                MessageWithReferencesInputSerializer,
                MessageInputSerializer(many=True, allow_empty=False),
            ],
            resource_type_field_name=None,
            many=False,
        ),
        responses={
            201: MessageAppendResultSerializer,
            **errors(
                404,
                409,
                422,
                500,
                503,
                *_BODY_ERRORS,
                text={
                    **_REFERENCE_ERROR_TEXT,
                    409: ARCHIVED_409,
                    400: _REFERENCE_ERROR_TEXT[400]
                    + " `references_not_allowed`: resolve_references or references on a list,"
                    " on a role other than user, or references without resolve_references."
                    " `too_many_messages`: a list of more than MAX_MESSAGES_PER_APPEND"
                    " messages. `too_many_keys`: an object in `metadata` or `content` with more"
                    " than MAX_JSON_KEYS keys.",
                },
            ),
        },
    )
    @extend_schema(
        methods=["DELETE"],
        operation_id="cortex_sessions_messages_after_destroy",
        summary="Delete the messages after a seq (all without it)",
        description=(
            "Removes every message with seq > `after_seq`; without `after_seq`, every message. "
            "The counters move in the same transaction; seq values are never reused. Any other "
            "query parameter is 400 `invalid_filter`, so a misspelt `after_seq` never deletes "
            "everything."
        ),
        parameters=[
            ID_PARAMETER,
            OpenApiParameter(
                "after_seq",
                {"type": "integer", "minimum": 0, "maximum": MAX_SEQ},
                OpenApiParameter.QUERY,
                description="Keep the messages up to this seq; default 0 (delete all).",
            ),
        ],
        request=None,
        responses={
            200: MessagesDeletedSerializer,
            **errors(404, 409, text={409: ARCHIVED_409}),
        },
    )
    @action(detail=True, methods=["get", "post", "delete"])
    def messages(self, request: Request, pk: str) -> Response:
        """GET: newest-first pages of messages, chronological within a page; POST: append, or
        with ``resolve_references`` store a user message with its session references; DELETE:
        remove the messages after ``after_seq`` (docs/design.md §11.4)."""
        if request.method == "POST":
            return self._append_messages(request, pk)
        if request.method == "DELETE":
            return self._delete_messages_after(request, pk)
        return self._list_messages(request, pk)

    def _delete_messages_after(self, request: Request, pk: str) -> Response:
        # Any other query parameter was refused by ``check_query_parameters``.
        after = parse_int_param(request, "after_seq", default=0, minimum=0, maximum=MAX_SEQ)
        result = services.delete_messages_after(scope=self.scope, session_id=pk, after_seq=after)
        return Response(
            MessagesDeletedSerializer({"session": result.session, "deleted": result.deleted}).data
        )

    @extend_schema(
        summary="Remove and return the newest message",
        description=(
            "For undo and regenerate: removes the newest message and answers it with the "
            "session's new counters. Concurrent pops never return the same message."
        ),
        parameters=[ID_PARAMETER, IDEMPOTENCY_PARAMETER],
        request=None,
        responses={
            200: PoppedMessageSerializer,
            **errors(
                404,
                409,
                422,
                text={
                    404: "`session_not_found`: missing, out of scope or malformed id, all "
                    "alike. `message_not_found`: the session has no messages.",
                    409: ARCHIVED_409,
                },
            ),
        },
    )
    @action(detail=True, methods=["post"], url_path="messages/pop", url_name="messages-pop")
    @idempotent
    def messages_pop(self, request: Request, pk: str) -> Response:
        """Pop the newest message (docs/design.md §11.4). Honours ``Idempotency-Key``
        (docs/design.md §12.1): a retried pop returns the message the first one removed and
        removes nothing more.

        Errors: 404 ``session_not_found`` / ``message_not_found`` (empty); 409
        ``session_archived``.
        """
        refuse_body(request)
        result = services.pop_message(scope=self.scope, session_id=pk)
        return Response(
            PoppedMessageSerializer({"session": result.session, "message": result.message}).data
        )

    @extend_schema(
        operation_id="cortex_sessions_message_destroy",
        summary="Delete one message",
        parameters=[
            ID_PARAMETER,
            OpenApiParameter(
                "seq",
                {"type": "integer", "minimum": 1, "maximum": MAX_SEQ},
                OpenApiParameter.PATH,
                description="The message's seq. A missing or malformed seq is 404 alike.",
            ),
        ],
        request=None,
        responses={
            200: MessagesDeletedSerializer,
            **errors(
                404,
                409,
                text={
                    404: "`session_not_found`: missing, out of scope or malformed id, all "
                    "alike. `message_not_found`: no message with that seq.",
                    409: ARCHIVED_409,
                },
            ),
        },
    )
    @action(
        detail=True,
        methods=["delete"],
        url_path=r"messages/(?P<seq>[^/]+)",
        url_name="messages-seq",
    )
    def messages_seq(self, request: Request, pk: str, seq: str) -> Response:
        """Delete the message ``seq`` (docs/design.md §11.4); ``deleted`` is 1.

        Errors: 404 ``session_not_found`` / ``message_not_found``; 409 ``session_archived``.
        """
        number = int(seq) if seq.isascii() and seq.isdigit() else 0
        if not 1 <= number <= MAX_SEQ:
            services.get_session(scope=self.scope, session_id=pk)  # a foreign id stays 404
            raise MessageNotFound()
        session = services.delete_message(scope=self.scope, session_id=pk, seq=number)
        return Response(MessagesDeletedSerializer({"session": session, "deleted": 1}).data)

    def _list_messages(self, request: Request, pk: str) -> Response:
        maximum = app_settings.MAX_PAGE_SIZE
        limit = parse_int_param(
            request,
            "limit",
            default=min(app_settings.PAGE_SIZE, maximum),
            minimum=1,
            maximum=maximum,
        )
        after = parse_int_param(request, "after_seq", default=None, minimum=0, maximum=MAX_SEQ)
        before = parse_int_param(request, "before_seq", default=None, minimum=0, maximum=MAX_SEQ)
        rows = services.list_messages(
            scope=self.scope,
            session_id=pk,
            limit=limit + 1,
            after_seq=after,
            before_seq=before,
            q=parse_search_query(request),
        )
        forward = after is not None and before is None
        has_more = len(rows) > limit
        if has_more:
            rows = rows[:limit] if forward else rows[1:]
        next_url = None
        if has_more:
            url = request.build_absolute_uri()
            if forward:
                next_url = replace_query_param(url, "after_seq", rows[-1].seq)
            else:
                next_url = replace_query_param(url, "before_seq", rows[0].seq)
        page = {"results": rows, "has_more": has_more, "next": next_url}
        return Response(MessagePageSerializer(page).data)

    @idempotent
    def _append_messages(self, request: Request, pk: str) -> Response:
        if isinstance(request.data, list):
            # Before any per-message work: 20,000 messages held the session's lock for a
            # minute (docs/design.md §12.6).
            services.check_message_count(len(request.data))
            for index, item in enumerate(request.data):
                for key in ("resolve_references", "references"):
                    if isinstance(item, Mapping) and key in item:
                        _refuse_references(
                            f"{index}.{key}",
                            "Session references apply only to a single message, not a list.",
                        )
            items, _ = message_list_data(request.data)
        else:
            serializer = MessageWithReferencesInputSerializer(data=request.data)
            serializer.is_valid(raise_exception=True)
            data = serializer.validated_data
            if data["resolve_references"]:
                return self._append_with_references(pk, data)
            if "references" in data:
                _refuse_references("references", "references needs resolve_references: true.")
            items = [data]
        result = services.append_messages(
            scope=self.scope,
            session_id=pk,
            messages=[
                services.MessageInput(
                    role=item["role"],
                    content=item["content"],
                    source=item.get("source"),
                    metadata=item.get("metadata"),
                )
                for item in items
            ],
        )
        return self._append_response(result)

    def _append_with_references(self, pk: str, data: Mapping[str, Any]) -> Response:
        """Store a user message with its session references (docs/design.md §8.8)."""
        if data["role"] != Message.Role.USER:
            _refuse_references("role", "resolve_references needs role 'user'.")
        if data.get("source", Message.Source.USER) != Message.Source.USER:
            _refuse_references("source", "resolve_references needs source 'user' (or none).")
        result = references.append_message_with_references(
            scope=self.scope,
            session_id=pk,
            content=data["content"],
            references=data.get("references", ()),
            metadata=data.get("metadata"),
            deadline=self._reference_deadline(),
        )
        return self._append_response(result)

    def _append_response(self, result: services.AppendResult) -> Response:
        data = {"session": result.session, "messages": result.messages}
        return Response(MessageAppendResultSerializer(data).data, status=status.HTTP_201_CREATED)

    # -- session references -----------------------------------------------------------------------

    def _reference_deadline(self) -> Deadline | None:
        """The deadline of this request's reference preparation (``reference_timeout``)."""
        if self.reference_timeout is None:
            return None
        return Deadline.in_seconds(self.reference_timeout)

    @extend_schema(
        summary="Sessions the user may mention in this session",
        parameters=CANDIDATE_PARAMETERS,
        responses={
            200: ReferenceCandidateListSerializer,
            **errors(
                404,
                500,
                text={
                    400: "`invalid_filter`: a bad `limit`; `too_long`, `nul_character`: a bad "
                    "`q`; `invalid_scope`.",
                    500: "`SESSION_REFERENCE_INVALID_CONFIG`: CANDIDATE_LIMIT is invalid "
                    "(not caused by the request).",
                },
            ),
        },
    )
    @action(
        detail=True,
        methods=["get"],
        url_path="reference-candidates",
        url_name="reference-candidates",
    )
    def reference_candidates(self, request: Request, pk: str) -> Response:
        """``{"results": [candidate, ...]}`` for the mention picker (docs/design.md §8.4).

        Errors: 400 ``invalid_filter`` (bad ``limit``), ``too_long`` / ``nul_character`` (bad
        ``q``); 404 ``session_not_found``.
        """
        ceiling = app_settings.CANDIDATE_LIMIT
        limit = parse_int_param(
            request,
            "limit",
            default=None,
            minimum=1,
            maximum=MAX_SEQ,
            message=(
                f"limit must be an integer of at least 1; at most CANDIDATE_LIMIT ({ceiling}) "
                "candidates are returned, and a larger limit is lowered to it."
            ),
        )
        query = text_param(request, "q", max_length=MAX_CANDIDATE_QUERY)
        rows = references.reference_candidates(
            scope=self.scope, session_id=pk, query=query, limit=limit
        )
        return Response(ReferenceCandidateListSerializer({"results": rows}).data)

    @extend_schema(
        summary="Prepare a message's session references without storing anything",
        parameters=[ID_PARAMETER],
        request=ReferencePrepareSerializer,
        responses={
            200: PreparedReferencesSerializer,
            **errors(404, 500, 503, *_BODY_ERRORS, text=_REFERENCE_ERROR_TEXT),
        },
    )
    @action(
        detail=True,
        methods=["post"],
        url_path="references/prepare",
        url_name="references-prepare",
    )
    def prepare_references(self, request: Request, pk: str) -> Response:
        """The readable content and the reference context a user message would be stored with
        (docs/design.md §8.8); nothing is written.

        Errors: 400 validation and ``SESSION_REFERENCE_INVALID_REFERENCE`` / ``_SELF_REFERENCE``
        / ``_TOO_MANY``; 404 ``session_not_found`` or ``SESSION_REFERENCE_READ_FAILED``; 413
        ``SESSION_REFERENCE_BUDGET_EXCEEDED``; 503 ``SESSION_REFERENCE_CANCELLED``.
        """
        serializer = ReferencePrepareSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        prepared = references.prepare_references(
            scope=self.scope,
            session_id=pk,
            content=serializer.validated_data["content"],
            references=serializer.validated_data.get("references", ()),
            deadline=self._reference_deadline(),
        )
        return Response(PreparedReferencesSerializer(prepared.as_dict()).data)


def _is_merge_patch(request: Request) -> bool:
    """Whether the request body is declared as a JSON Merge Patch (RFC 7386)."""
    content_type = request.content_type or ""
    return content_type.split(";", 1)[0].strip().lower() == MERGE_PATCH_MEDIA_TYPE


def _refuse_references(field: str, message: str) -> None:
    """Raise 400 ``references_not_allowed`` for ``field``."""
    raise ReferencesNotAllowed({field: [ErrorDetail(message, code="references_not_allowed")]})
