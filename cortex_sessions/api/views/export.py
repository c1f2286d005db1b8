"""``GET /sessions/export/``: the request's sessions as JSON Lines, streamed (docs/design.md §18.3)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.decorators import action
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.request import Request

from cortex_sessions import services
from cortex_sessions.transfer import export_conversations

from ..mixins import CortexAPIMixin
from ..schema import errors

__all__ = ["JSON_LINES", "JSONLinesRenderer", "SessionExportMixin"]

#: The media type of the export (one JSON object per line).
JSON_LINES = "application/jsonl"


class JSONLinesRenderer(BaseRenderer):
    """Lets a client ask for the export with ``Accept: application/jsonl`` (or ``?format=jsonl``).

    The export's lines are streamed by the view, not rendered; what this renders is an error
    body, as one JSON line.
    """

    media_type = JSON_LINES
    format = "jsonl"
    charset = "utf-8"

    def render(
        self,
        data: Any,
        accepted_media_type: str | None = None,
        renderer_context: Mapping[str, Any] | None = None,
    ) -> bytes:
        """``data`` as compact JSON and a newline (an error body)."""
        return JSONRenderer().render(data) + b"\n"


class SessionExportMixin(CortexAPIMixin):
    """The export action of :class:`~cortex_sessions.api.views.SessionViewSet`."""

    @extend_schema(
        summary="Export sessions as JSON Lines",
        parameters=[
            OpenApiParameter(
                "agent_id", OpenApiTypes.STR, description="Only this agent's sessions."
            )
        ],
        responses={
            (200, JSON_LINES): OpenApiResponse(
                OpenApiTypes.STR,
                description="One conversation per line in the import format "
                "(`manage.py cortex_sessions_import` reads it back), streamed.",
            ),
            **errors(),
        },
    )
    @action(
        detail=False,
        methods=["get"],
        url_path="export",
        renderer_classes=[JSONRenderer, JSONLinesRenderer],
    )
    def export(self, request: Request) -> StreamingHttpResponse:
        """Every session at the request's scope (narrowed with ``scope`` or ``X-Cortex-Scope``),
        archived ones included, with its messages, as JSON Lines in constant memory: sessions
        by keyset in chunks, each session's messages in chunks, written as they are read
        (:func:`cortex_sessions.transfer.export_conversations`).

        Errors (before the first line): 400 ``invalid_agent_id``, ``invalid_scope``; 403
        ``scope_forbidden`` for a narrowing outside the caller's scope, ``no_scope``.
        """
        agent_id = request.query_params.get("agent_id")
        if agent_id is not None:
            services.check_agent_id(agent_id)
        lines = export_conversations(scope=self.scope, agent_id=agent_id)
        response = StreamingHttpResponse(
            (line.encode("utf-8") for line in lines), content_type=f"{JSON_LINES}; charset=utf-8"
        )
        response["Content-Disposition"] = 'attachment; filename="sessions.jsonl"'
        return response
