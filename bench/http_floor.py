"""The floor of ``python -m bench.http``: plain Django function views answering what the API's
hot endpoints answer, with the same SQL and the same authentication, and nothing else.

Each view reads ``request.user`` (the session cookie, through Django's own middleware, as the
API's ``SessionAuthentication`` does), asks the host's ``SCOPE_RESOLVER`` for the scope (the
same query), calls the same service function as the API view (the same statements), and writes
the same JSON body with ``json.dumps``: no serializer, no filterset, no content negotiation.
POSTs pass Django's ``CsrfViewMiddleware`` (the API's ``SessionAuthentication`` runs the same
check). Bodies are not validated beyond what the service checks: the floor is what a request
costs when only the service call, the authentication and the JSON remain.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from django.http import HttpRequest, HttpResponse
from django.urls import path

from cortex_sessions import services
from cortex_sessions.conf import app_settings
from cortex_sessions.models import Message, Session
from cortex_sessions.scope import as_scope
from cortex_sessions.search_limits import search_timeout

__all__ = ["message_dict", "session_dict", "urlpatterns"]

PAGE_SIZE = 50


def _time(value: datetime | None) -> str | None:
    """DRF's ``DateTimeField`` output for a UTC datetime (``Z`` for ``+00:00``)."""
    if value is None:
        return None
    text = value.isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


def session_dict(session: Session) -> dict[str, Any]:
    """A session as ``SessionSerializer`` writes it."""
    return {
        "id": str(session.id),
        "agent_id": session.agent_id,
        "scope": str(session.scope),
        "title": session.title,
        "metadata": session.metadata,
        "cwd": session.cwd,
        "message_count": session.message_count,
        "last_message": session.last_message,
        "is_default": session.is_default,
        "backfilled_by": session.backfilled_by,
        "created_at": _time(session.created_at),
        "updated_at": _time(session.updated_at),
        "archived_at": _time(session.archived_at),
        "forked_from": None if session.forked_from is None else str(session.forked_from),
        "forked_at_seq": session.forked_at_seq,
        "expires_at": _time(session.expires_at),
        "legal_hold": session.legal_hold,
        "input_tokens": session.input_tokens,
        "output_tokens": session.output_tokens,
        "cost": f"{session.cost:.6f}",
        "context_tokens": session.context_tokens,
    }


def message_dict(message: Message) -> dict[str, Any]:
    """A message as ``MessageSerializer`` writes it."""
    return {
        "id": message.id,
        "session": None if message.session_id is None else str(message.session_id),
        "seq": message.seq,
        "role": message.role,
        "source": message.source,
        "content": message.content,
        "metadata": message.metadata,
        "created_at": _time(message.created_at),
        "compacts_through_seq": message.compacts_through_seq,
        "usage": message.usage,
        "token_count": message.token_count,
    }


def _json(data: Any, status: int = 200) -> HttpResponse:
    return HttpResponse(
        json.dumps(data, ensure_ascii=False, separators=(",", ":")),
        status=status,
        content_type="application/json",
    )


def _scope(request: HttpRequest) -> Any:
    """The host's scope of the request (the API's ``HasCortexScope`` without narrowing)."""
    resolved = app_settings.SCOPE_RESOLVER(request)
    if not resolved:
        raise PermissionError("no scope")
    return as_scope(resolved)


def _refused() -> HttpResponse:
    return _json({"code": "no_scope", "detail": "No scope."}, status=403)


def messages(request: HttpRequest, pk: str) -> HttpResponse:
    """GET: the newest 50 messages; POST: append one message (``Idempotency-Key`` honoured by
    the service's own key)."""
    try:
        scope = _scope(request)
    except PermissionError:
        return _refused()
    if request.method == "POST":
        body = json.loads(request.body)
        result = services.append_messages(
            scope=scope,
            session_id=pk,
            messages=[services.MessageInput(role=body["role"], content=body["content"])],
            idempotency_key=request.headers.get("Idempotency-Key"),
        )
        data = {
            "session": session_dict(result.session),
            "messages": [message_dict(message) for message in result.messages],
        }
        return _json(data, status=201)
    rows = services.list_messages(scope=scope, session_id=pk, limit=PAGE_SIZE + 1)
    has_more = len(rows) > PAGE_SIZE
    if has_more:
        rows = rows[1:]
    next_url = None
    if has_more:
        next_url = request.build_absolute_uri(
            f"{request.path}?{urlencode({'before_seq': rows[0].seq})}"
        )
    return _json(
        {
            "results": [message_dict(message) for message in rows],
            "has_more": has_more,
            "next": next_url,
        }
    )


def detail(request: HttpRequest, pk: str) -> HttpResponse:
    """One session."""
    try:
        scope = _scope(request)
    except PermissionError:
        return _refused()
    return _json(session_dict(services.get_session(scope=scope, session_id=pk)))


def resolve(request: HttpRequest) -> HttpResponse:
    """The agent's default session at the request's scope."""
    try:
        scope = _scope(request)
    except PermissionError:
        return _refused()
    body = json.loads(request.body)
    session, created = services.resolve_session(scope=scope, agent_id=body["agent_id"])
    return _json(session_dict(session), status=201 if created else 200)


def _filters(request: HttpRequest) -> services.SessionFilters:
    return services.SessionFilters(
        agent_id=request.GET.get("agent_id") or None, q=request.GET.get("q") or None
    )


def listing(request: HttpRequest) -> HttpResponse:
    """A page of sessions (``agent_id`` or ``q``), ``{count, next, previous, results}``."""
    try:
        scope = _scope(request)
    except PermissionError:
        return _refused()
    filters = _filters(request)
    queryset = services.session_queryset(scope=scope, filters=filters)
    with search_timeout(queryset.db, active=filters.q is not None):
        count = queryset.count()
        rows = list(queryset[:PAGE_SIZE])
    next_url = None
    if count > PAGE_SIZE:
        query = request.GET.copy()
        query["limit"] = str(PAGE_SIZE)
        query["offset"] = str(PAGE_SIZE)
        next_url = request.build_absolute_uri(f"{request.path}?{query.urlencode()}")
    results = []
    for session in rows:
        row = session_dict(session)
        match = getattr(session, "search_match", None)
        if match is not None:
            row["match"] = {"snippet": match.snippet, "seq": match.seq, "rank": match.rank}
        results.append(row)
    return _json({"count": count, "next": next_url, "previous": None, "results": results})


def count(request: HttpRequest) -> HttpResponse:
    """``{"count": n}`` for the same filters."""
    try:
        scope = _scope(request)
    except PermissionError:
        return _refused()
    return _json({"count": services.count_sessions(scope=scope, filters=_filters(request))})


def context(request: HttpRequest, pk: str) -> HttpResponse:
    """The context read: the messages a model gets (summary, then the kept messages)."""
    try:
        scope = _scope(request)
    except PermissionError:
        return _refused()
    window = services.context_messages(scope=scope, session_id=pk)
    return _json(
        {
            "messages": [message_dict(message) for message in window.messages],
            "compacted_through_seq": window.compacted_through_seq,
            "tokens": window.tokens,
            "truncated": window.truncated,
        }
    )


urlpatterns = [
    path("sessions/", listing),
    path("sessions/count/", count),
    path("sessions/resolve/", resolve),
    path("sessions/<str:pk>/", detail),
    path("sessions/<str:pk>/messages/", messages),
    path("sessions/<str:pk>/context/", context),
]
