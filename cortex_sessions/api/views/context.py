"""The context window actions of the session viewset (docs/design.md §16.3, §16.4): compact a
session, and read what a model should see of it."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from cortex_sessions import services
from cortex_sessions.services.context import MAX_CONTEXT_TOKENS

from ..idempotency import IDEMPOTENCY_PARAMETER, idempotent
from ..mixins import CortexAPIMixin
from ..pagination import parse_int_param
from ..schema import ARCHIVED_409, BODY_ERRORS, ID_PARAMETER, TOKEN_COUNTER_503, errors
from ..serializers import (
    CompactSerializer,
    ContextWindowSerializer,
    MessageAppendResultSerializer,
)

__all__ = ["CONTEXT_PARAMETERS", "SessionContextMixin"]

CONTEXT_PARAMETERS = [
    ID_PARAMETER,
    OpenApiParameter(
        "max_tokens",
        {"type": "integer", "minimum": 1, "maximum": MAX_CONTEXT_TOKENS},
        OpenApiParameter.QUERY,
        description=(
            "The budget in tokens (as token_count counts them): the oldest messages after the "
            "summary are dropped whole until the context fits, and a tool result is never "
            "left first. Without it, the whole context."
        ),
    ),
]


class SessionContextMixin(CortexAPIMixin):
    """The ``context`` (GET) and ``compact`` (POST) actions of
    :class:`~cortex_sessions.api.views.SessionViewSet` (docs/design.md §16.3, §16.4)."""

    @extend_schema(
        summary="Read the context a model should see",
        description=(
            "The newest live compaction summary, then every message after its through_seq "
            "(older summaries excepted), in seq order; without a compaction, every message. "
            "With `max_tokens`, the oldest messages after the summary are dropped whole until "
            "the token_count sum fits, and no kept tail starts with a `tool` message. Nothing "
            "is written (docs/design.md §16.4)."
        ),
        parameters=CONTEXT_PARAMETERS,
        request=None,
        responses={
            200: ContextWindowSerializer,
            **errors(
                404,
                422,
                text={
                    400: "`invalid_filter`: max_tokens is not an integer from 1 to "
                    f"{MAX_CONTEXT_TOKENS}.",
                    422: "`context_budget_exceeded`: max_tokens cannot hold the summary and "
                    "the newest message.",
                },
            ),
        },
    )
    @action(detail=True, methods=["get"])
    def context(self, request: Request, pk: str) -> Response:
        """The context read (docs/design.md §16.4).

        Errors: 400 ``invalid_filter`` (``max_tokens``); 404 ``session_not_found``; 422
        ``context_budget_exceeded``.
        """
        budget = parse_int_param(
            request, "max_tokens", default=None, minimum=1, maximum=MAX_CONTEXT_TOKENS
        )
        window = services.context_messages(scope=self.scope, session_id=pk, max_tokens=budget)
        return Response(ContextWindowSerializer(window).data)

    @extend_schema(
        summary="Compact a session",
        description=(
            "Appends `summary` as the session's next message (role user, source checkpoint, "
            "`compacts_through_seq`), which stands for every message up to `through_seq` in "
            "the context read from then on. No message is deleted; deleting the summary "
            "undoes the compaction (docs/design.md §16.3)."
        ),
        parameters=[ID_PARAMETER, IDEMPOTENCY_PARAMETER],
        request=CompactSerializer,
        responses={
            201: MessageAppendResultSerializer,
            **errors(
                404,
                409,
                422,
                *BODY_ERRORS,
                text={
                    400: "`invalid_through_seq` (not an integer from 1 to the last seq beyond "
                    "the newest compaction's), `invalid_content`, `empty_content` (an empty "
                    "summary), `summary_too_large` (a summary over MAX_MESSAGE_BYTES), "
                    "`invalid_usage`, `usage_total_overflow` (the summary's usage would take "
                    "the session's cost to 10^14 or a token total past 2^63 - 1), "
                    "`unknown_field`, `parse_error`.",
                    409: ARCHIVED_409,
                    503: TOKEN_COUNTER_503,
                    413: "`request_too_large`: the body is over DATA_UPLOAD_MAX_MEMORY_SIZE "
                    "(a summary over MAX_MESSAGE_BYTES is 400 `summary_too_large`).",
                },
            ),
        },
    )
    @action(detail=True, methods=["post"])
    @idempotent
    def compact(self, request: Request, pk: str) -> Response:
        """Compact the session (docs/design.md §16.3); 201 with the session and the summary.
        Honours ``Idempotency-Key`` (docs/design.md §12.1).

        Errors: 400 ``invalid_through_seq``, ``summary_too_large`` and validation; 404
        ``session_not_found``; 409 ``session_archived``; 413 ``request_too_large``; 422
        ``idempotency_key_reused``; 503 ``token_counter_failed``.
        """
        serializer = CompactSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        result = services.compact_session(
            scope=self.scope,
            session_id=pk,
            through_seq=data["through_seq"],
            summary=data["summary"],
            usage=data.get("usage"),
        )
        body = {"session": result.session, "messages": result.messages}
        return Response(MessageAppendResultSerializer(body).data, status=status.HTTP_201_CREATED)
