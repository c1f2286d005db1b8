"""The service API: every business rule of sessions and messages lives here (docs/design.md §7.1).

Functions are keyword-only and take the caller's scope explicitly: reads match that scope and
everything beneath it (docs/design.md §2.3); a missing or empty scope raises ``NoScope`` (§2.4). Views,
admin actions and management commands call these functions and nothing else writes app-owned
columns. Every write that touches more than one row runs in one transaction on the database the
router picks for the model (docs/design.md §10).

Public import path: ``cortex_sessions.services``. The package keeps one concern per module
(``sessions``, ``messages``, ``maintenance``); everything public is re-exported here, and
every service that does I/O has an ``a``-prefixed async twin from ``aio`` (docs/design.md §13.1).
"""

from __future__ import annotations

from ._common import MAX_INT64, ORDERING_FIELDS, check_agent_id
from .aio import (
    aappend_messages,
    aclear_messages,
    acount_sessions,
    acreate_session,
    adelete_message,
    adelete_session,
    aget_session,
    alist_messages,
    alist_sessions,
    alist_sessions_page,
    amake_default,
    aprune_idempotency_keys,
    arecount_sessions,
    aresolve_session,
    aupdate_session,
)
from .idempotency import prune_idempotency_keys
from .keyset import SessionPage, list_sessions_page
from .maintenance import CounterDrift, recount_sessions
from .messages import (
    AppendResult,
    MessageInput,
    append_messages,
    clear_messages,
    delete_message,
    list_messages,
)
from .sessions import (
    count_sessions,
    create_session,
    delete_session,
    get_session,
    list_sessions,
    make_default,
    resolve_session,
    session_queryset,
    update_session,
)

__all__ = [
    "MAX_INT64",
    "ORDERING_FIELDS",
    "AppendResult",
    "CounterDrift",
    "MessageInput",
    "SessionPage",
    "aappend_messages",
    "aclear_messages",
    "acount_sessions",
    "acreate_session",
    "adelete_message",
    "adelete_session",
    "aget_session",
    "alist_messages",
    "alist_sessions",
    "alist_sessions_page",
    "amake_default",
    "append_messages",
    "aprune_idempotency_keys",
    "arecount_sessions",
    "aresolve_session",
    "aupdate_session",
    "check_agent_id",
    "clear_messages",
    "count_sessions",
    "create_session",
    "delete_message",
    "delete_session",
    "get_session",
    "list_messages",
    "list_sessions",
    "list_sessions_page",
    "make_default",
    "prune_idempotency_keys",
    "recount_sessions",
    "resolve_session",
    "session_queryset",
    "update_session",
]
