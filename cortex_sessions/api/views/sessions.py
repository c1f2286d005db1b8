"""The session viewset (docs/design.md §7.3): the collection (list, create, count, resolve),
one session (get, replace, patch, delete, make-default) and its lifecycle (fork, archive,
unarchive); its message and session-reference actions come from
:mod:`~cortex_sessions.api.views.messages` and :mod:`~cortex_sessions.api.views.references`."""

from __future__ import annotations

from typing import Any

from django.http import Http404
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import UnsupportedMediaType
from rest_framework.request import Request
from rest_framework.response import Response

from cortex_sessions import services
from cortex_sessions.exceptions import SessionNotFound
from cortex_sessions.models import Session
from cortex_sessions.search_limits import search_timeout

from ..examples import (
    CREATE_EXAMPLES,
    FORK_EXAMPLES,
    PATCH_EXAMPLES,
    RESOLVE_EXAMPLES,
    UPDATE_EXAMPLES,
)
from ..filters import SessionFilter, SessionFilterBackend
from ..idempotency import IDEMPOTENCY_PARAMETER, idempotent
from ..mixins import CortexAPIMixin
from ..pagination import SessionPagination
from ..parsers import MERGE_PATCH_MEDIA_TYPE, JSONObjectParser, MergePatchParser
from ..schema import (
    ARCHIVED_409,
    BODY_ERRORS,
    HELD_409,
    ID_PARAMETER,
    SCOPE_PARAMETERS,
    SEARCH_503,
    errors,
)
from ..scoping import narrow_scope
from ..serializers import (
    CompactSerializer,
    CountSerializer,
    ForkSerializer,
    ListedSessionSerializer,
    MessageWithReferencesInputSerializer,
    ReferencePrepareSerializer,
    ResolveSerializer,
    SessionCreateSerializer,
    SessionMergePatchSerializer,
    SessionSerializer,
    SessionUpdateSerializer,
    UsageReportSerializer,
    refuse_body,
)
from .context import SessionContextMixin
from .export import SessionExportMixin
from .messages import SessionMessagesMixin
from .references import SessionReferencesMixin

__all__ = ["SessionViewSet"]


@extend_schema(tags=["sessions"], parameters=SCOPE_PARAMETERS)
class SessionViewSet(
    SessionContextMixin,
    SessionMessagesMixin,
    SessionReferencesMixin,
    SessionExportMixin,
    CortexAPIMixin,
    viewsets.GenericViewSet[Session],
):
    """Sessions and their messages at the request's scope (docs/design.md §7.3)."""

    queryset = Session.objects.none()  # schema introspection only; rows come from services
    serializer_class = SessionSerializer
    pagination_class = SessionPagination
    filter_backends = [SessionFilterBackend]
    filterset_class = SessionFilter
    parser_classes = [JSONObjectParser, MergePatchParser]
    lookup_value_regex = "[^/]+"  # any id reaches the view, so a malformed one is a JSON 404
    query_parameters = {
        "list": frozenset({*SessionFilter.base_filters, "limit", "offset", "cursor"}),
        "count": frozenset(SessionFilter.base_filters),
        "usage": frozenset({*SessionFilter.base_filters, "group_by"}),
        "messages.get": frozenset({"limit", "after_seq", "before_seq", "q"}),
        "messages.delete": frozenset({"after_seq"}),
        "reference_candidates": frozenset({"q", "limit"}),
        "context": frozenset({"max_tokens"}),
        "export": frozenset({"agent_id"}),
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
        """The sessions at and beneath the request's scope (none before it is resolved).

        The list and the count get an empty base instead: their ``SessionFilter`` builds the
        whole query from the scope and the parameters (``filter_queryset``), so a scoped base
        would be built only to be replaced (docs/design.md §14.5).
        """
        scope = getattr(self.request, "cortex_scope", None)
        if scope is None or self.action in ("list", "count"):
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
            "compact": CompactSerializer,
        }.get(self.action, SessionSerializer)

    def _session_response(self, session: Session, code: int = status.HTTP_200_OK) -> Response:
        return Response(SessionSerializer(session).data, status=code)

    # -- collection -------------------------------------------------------------------------------

    @extend_schema(
        summary="List sessions",
        responses={200: ListedSessionSerializer(many=True), **errors(text=SEARCH_503)},
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
        examples=CREATE_EXAMPLES,
        responses={201: SessionSerializer, **errors(422, *BODY_ERRORS)},
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
        responses={200: CountSerializer, **errors(text=SEARCH_503)},
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
        summary="Usage totals",
        filters=True,
        parameters=[
            OpenApiParameter(
                "group_by",
                str,
                enum=[*services.GROUP_BY],
                description=(
                    "Group the sums by agent_id, or by the scope level directly beneath the "
                    "request's scope (per tenant); absent: one total."
                ),
            )
        ],
        responses={200: UsageReportSerializer, **errors(text=SEARCH_503)},
    )
    @action(detail=False, methods=["get"])
    def usage(self, request: Request) -> Response:
        """``{"group_by", "totals", "groups"}``: the sums of the usage totals of the sessions
        the list with the same filters shows, whole or grouped (``group_by=agent_id|scope``),
        in one statement (docs/design.md §16.1; ``ordering`` is accepted and ignored).

        Errors as the list; 400 ``invalid_filter`` for another ``group_by``.
        """
        filterset = SessionFilterBackend().get_validated_filterset(
            request, self.get_queryset(), self
        )
        group_by = request.query_params.get("group_by")
        with search_timeout(self.get_queryset().db, active="q" in request.query_params):
            found = services.usage_totals(
                scope=self.scope, filters=filterset.session_filters, group_by=group_by
            )
        groups = found if isinstance(found, list) else None
        totals = found if not isinstance(found, list) else _summed(found)
        return Response(
            UsageReportSerializer({"group_by": group_by, "totals": totals, "groups": groups}).data
        )

    @extend_schema(
        summary="Resolve the session a run uses",
        request=ResolveSerializer,
        examples=RESOLVE_EXAMPLES,
        responses={
            200: OpenApiResponse(SessionSerializer, description="An existing session."),
            201: OpenApiResponse(SessionSerializer, description="The default was just created."),
            **errors(
                404,
                409,
                *BODY_ERRORS,
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
        examples=UPDATE_EXAMPLES,
        responses={200: SessionSerializer, **errors(404, *BODY_ERRORS)},
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
        examples=PATCH_EXAMPLES,
        responses={200: SessionSerializer, **errors(404, *BODY_ERRORS)},
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
        # The members as sent (a null in metadata deletes a key), expires_at as parsed.
        patch = {
            name: value if name == "expires_at" else request.data[name]
            for name, value in serializer.validated_data.items()
        }
        return self._session_response(
            services.patch_session(scope=self.scope, session_id=pk, patch=patch)
        )

    @extend_schema(
        summary="Delete a session and its messages",
        parameters=[ID_PARAMETER],
        responses={
            204: OpenApiResponse(description="Deleted."),
            **errors(404, 409, text={409: HELD_409}),
        },
    )
    def destroy(self, request: Request, pk: str) -> Response:
        """Delete the session with its messages (deleting the default is allowed, §6.3).

        Errors: 404 ``session_not_found``; 409 ``legal_hold`` (docs/design.md §18.1).
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
        examples=FORK_EXAMPLES,
        responses={
            201: SessionSerializer,
            **errors(
                404,
                422,
                *BODY_ERRORS,
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


def _summed(groups: list[services.UsageTotals]) -> dict[str, Any]:
    """The sums over ``groups`` (the totals of a grouped usage answer, with no second query)."""
    names = ("sessions", "message_count", "input_tokens", "output_tokens", "cost")
    summed: dict[str, Any] = {name: sum(getattr(group, name) for group in groups) for name in names}
    summed["context_tokens"] = sum(group.context_tokens for group in groups)
    return summed


def _is_merge_patch(request: Request) -> bool:
    """Whether the request body is declared as a JSON Merge Patch (RFC 7386)."""
    content_type = request.content_type or ""
    return content_type.split(";", 1)[0].strip().lower() == MERGE_PATCH_MEDIA_TYPE
