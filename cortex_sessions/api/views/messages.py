"""The message actions of the session viewset (docs/design.md §11.4, §8.8): read a page, append
(with session references or not), pop, and delete after a seq or one message."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from drf_spectacular.utils import OpenApiParameter, PolymorphicProxySerializer, extend_schema
from rest_framework import status
from rest_framework.decorators import action
from rest_framework.exceptions import ErrorDetail
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.utils.urls import replace_query_param

from cortex_sessions import services
from cortex_sessions.conf import DEFAULTS, app_settings
from cortex_sessions.exceptions import MessageNotFound
from cortex_sessions.models import Message
from cortex_sessions.references import service as references

from ..examples import APPEND_EXAMPLES
from ..exceptions import ReferencesNotAllowed
from ..filters import SEARCH_QUERY_HELP, SEARCH_QUERY_SCHEMA, parse_search_query
from ..idempotency import IDEMPOTENCY_PARAMETER, idempotent, idempotent_with
from ..keyed_append import ONE_MESSAGE, message_input
from ..pagination import parse_int_param
from ..schema import (
    ARCHIVED_409,
    BODY_ERRORS,
    HELD_409,
    ID_PARAMETER,
    MAX_SEQ,
    REFERENCE_ERROR_TEXT,
    SEARCH_503,
    TOKEN_COUNTER_TEXT,
    errors,
)
from ..serializers import (
    MessageAppendResultSerializer,
    MessageInputSerializer,
    MessagePageSerializer,
    MessagesDeletedSerializer,
    MessageWithReferencesInputSerializer,
    PoppedMessageSerializer,
    message_list_data,
    refuse_body,
)
from .references import SessionReferencesMixin

__all__ = ["MESSAGE_PAGE_PARAMETERS", "SessionMessagesMixin"]

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


class SessionMessagesMixin(SessionReferencesMixin):
    """The message actions of :class:`~cortex_sessions.api.views.SessionViewSet`
    (``messages`` GET/POST/DELETE, ``messages/pop``, ``messages/{seq}``)."""

    @extend_schema(
        methods=["GET"],
        summary="Read a page of messages",
        parameters=MESSAGE_PAGE_PARAMETERS,
        request=None,
        responses={200: MessagePageSerializer, **errors(404, text=SEARCH_503)},
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
        examples=APPEND_EXAMPLES,
        responses={
            201: MessageAppendResultSerializer,
            **errors(
                404,
                409,
                422,
                500,
                503,
                *BODY_ERRORS,
                text={
                    **REFERENCE_ERROR_TEXT,
                    409: ARCHIVED_409,
                    503: REFERENCE_ERROR_TEXT[503] + TOKEN_COUNTER_TEXT,
                    400: REFERENCE_ERROR_TEXT[400]
                    + " `references_not_allowed`: resolve_references or references on a list,"
                    " on a role other than user, or references without resolve_references."
                    " `too_many_messages`: a list of more than MAX_MESSAGES_PER_APPEND"
                    " messages. `too_many_keys`: an object in `metadata` or `content` with more"
                    " than MAX_JSON_KEYS keys. `usage_total_overflow`: the messages would take"
                    " the session's cost to 10^14 or a token total past 2^63 - 1.",
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
            **errors(404, 409, text={409: f"{ARCHIVED_409} {HELD_409}"}),
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
                    409: f"{ARCHIVED_409} {HELD_409}",
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
                    409: f"{ARCHIVED_409} {HELD_409}",
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

    @idempotent_with(ONE_MESSAGE)
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
            messages=[message_input(item) for item in items],
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
            usage=data.get("usage"),
        )
        return self._append_response(result)

    def _append_response(self, result: services.AppendResult) -> Response:
        data = {"session": result.session, "messages": result.messages}
        return Response(MessageAppendResultSerializer(data).data, status=status.HTTP_201_CREATED)


def _refuse_references(field: str, message: str) -> None:
    """Raise 400 ``references_not_allowed`` for ``field``."""
    raise ReferencesNotAllowed({field: [ErrorDetail(message, code="references_not_allowed")]})
