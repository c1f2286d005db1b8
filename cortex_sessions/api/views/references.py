"""The session-reference actions of the session viewset (docs/design.md §8.4, §8.8, §8.9):
the mention picker's candidates and preparing a message's references."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from cortex_sessions.conf import app_settings
from cortex_sessions.references import Deadline
from cortex_sessions.references import service as references

from ..examples import PREPARE_EXAMPLES
from ..filters import text_param
from ..mixins import CortexAPIMixin
from ..pagination import parse_int_param
from ..schema import BODY_ERRORS, ID_PARAMETER, MAX_SEQ, REFERENCE_ERROR_TEXT, errors
from ..serializers import (
    NO_NUL_PATTERN,
    PreparedReferencesSerializer,
    ReferenceCandidateListSerializer,
    ReferencePrepareSerializer,
)

__all__ = ["CANDIDATE_PARAMETERS", "MAX_CANDIDATE_QUERY", "SessionReferencesMixin"]

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


class SessionReferencesMixin(CortexAPIMixin):
    """The session-reference actions of :class:`~cortex_sessions.api.views.SessionViewSet`
    (``reference-candidates``, ``references/prepare``) and the deadline of preparing
    references, which appending a message with ``resolve_references`` shares."""

    #: Seconds one request may spend preparing session references; ``None`` (the default)
    #: means no limit. Past it the request fails with 503 ``SESSION_REFERENCE_CANCELLED``
    #: (docs/design.md §8.9). Set it on a subclass mounted by the host.
    reference_timeout: float | None = None

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
        examples=PREPARE_EXAMPLES,
        responses={
            200: PreparedReferencesSerializer,
            **errors(404, 500, 503, *BODY_ERRORS, text=REFERENCE_ERROR_TEXT),
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
