"""Erasure by scope over HTTP (docs/design.md §18.2): ``POST /erasures/`` and
``GET /erasures/{id}/``, for holders of the permission ``cortex_sessions.erase_scope``."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import status, viewsets
from rest_framework.request import Request
from rest_framework.response import Response

from cortex_sessions import services
from cortex_sessions.exceptions import InvalidScope, NoScope
from cortex_sessions.models import Erasure
from cortex_sessions.services.erasure import unfinished_erasure

from ..mixins import CortexAPIMixin
from ..permissions import CanEraseScope
from ..schema import BODY_ERRORS, errors
from ..serializers import ErasureCreateSerializer, ErasureSerializer

__all__ = ["ErasureViewSet"]

#: The path parameter of one erasure.
ERASURE_ID = OpenApiParameter(
    "id", OpenApiTypes.UUID, OpenApiParameter.PATH, description="The erasure's id."
)


@extend_schema(tags=["erasures"])
class ErasureViewSet(CortexAPIMixin, viewsets.GenericViewSet[Erasure]):
    """Erase every session of a scope, and watch an erasure's progress (docs/design.md §18.2).

    Only for users with ``cortex_sessions.erase_scope`` (403 ``permission_denied`` otherwise,
    an org admin of the scope included); the request's own scope plays no part, so no
    ``scope`` parameter or ``X-Cortex-Scope`` header is read.
    """

    queryset = Erasure.objects.none()  # schema introspection only; rows come from services
    serializer_class = ErasureSerializer
    permission_classes = [CanEraseScope]
    common_query_parameters = frozenset({"format"})
    lookup_value_regex = "[^/]+"  # any id reaches the view, so a malformed one is a JSON 404

    @transaction.non_atomic_requests
    def dispatch(self, request: Any, *args: Any, **kwargs: Any) -> Any:
        """DRF's dispatch, exempt from ``ATOMIC_REQUESTS``: an erasure commits batch by batch
        (docs/design.md §18.2), which one transaction around the request would undo."""
        return super().dispatch(request, *args, **kwargs)

    @extend_schema(
        summary="Erase a scope",
        request=ErasureCreateSerializer,
        responses={
            202: OpenApiResponse(
                ErasureSerializer,
                description="The erasure ran in this request in bounded batches; the record, "
                "`done`, with rows deleted per table and held sessions kept.",
            ),
            **errors(*BODY_ERRORS),
        },
    )
    def create(self, request: Request) -> Response:
        """Delete every session at or beneath ``scope`` and every row tied to it, skipping
        sessions on legal hold, in bounded transactions, and answer 202 with the record.

        When the scope has an unfinished erasure (a request or command cut off mid-way), that
        erasure is resumed instead of a new one started.

        Errors: 400 ``invalid_scope`` (empty or not canonical: never "everything"), 400
        ``unknown_field``; 401/403 ``not_authenticated``; 403 ``permission_denied``.
        """
        serializer = ErasureCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        scope = serializer.validated_data["scope"]
        try:
            unfinished = unfinished_erasure(scope=scope)
        except NoScope:
            raise InvalidScope("The scope to erase is empty.", field="scope") from None
        except InvalidScope as exc:
            raise InvalidScope(exc.message, field="scope") from None
        if unfinished is not None:
            erasure = services.resume_erasure(erasure_id=unfinished.pk)
        else:
            erasure = services.erase_scope(scope=scope, requested_by=str(request.user.pk))
        location = f"{request.path}{erasure.pk}/"  # POST /erasures/ -> /erasures/{id}/
        return Response(
            ErasureSerializer(erasure).data,
            status.HTTP_202_ACCEPTED,
            headers={"Location": location},
        )

    @extend_schema(
        summary="Progress of an erasure",
        parameters=[ERASURE_ID],
        responses={200: ErasureSerializer, **errors(404)},
    )
    def retrieve(self, request: Request, pk: str) -> Response:
        """The erasure record: ``status`` (``pending``, ``running``, ``done``), ``counts`` so
        far, ``skipped_held``.

        Errors: 404 ``erasure_not_found``; 401/403 ``not_authenticated``; 403
        ``permission_denied``.
        """
        return Response(ErasureSerializer(services.get_erasure(erasure_id=pk)).data)
