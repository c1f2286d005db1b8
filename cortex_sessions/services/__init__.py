"""The service API: every business rule of sessions and messages lives here (docs/design.md §7.1).

Functions are keyword-only and take the caller's scope explicitly: reads match that scope and
everything beneath it (docs/design.md §2.3); a missing or empty scope raises ``NoScope`` (§2.4). Views,
admin actions and management commands call these functions and nothing else writes app-owned
columns. Every write that touches more than one row runs in one transaction on the database the
router picks for the model (docs/design.md §10).

Public import path: ``cortex_sessions.services``. The package keeps one concern per module
(``sessions``, ``messages``, ``maintenance``, ``lifecycle``, ``undo``, ``retention``,
``totals``, ``erasure``; ``filters`` holds :class:`SessionFilters`, the one value every session list and count takes); everything public is
re-exported here, and every service that does I/O has an ``a``-prefixed async twin from ``aio``
(docs/design.md §13.1).
"""

from __future__ import annotations

from ._common import MAX_INT64, ORDERING_FIELDS, check_agent_id
from .aio import (
    aappend_messages,
    aarchive_session,
    aclear_messages,
    acompact_session,
    acontext_messages,
    acount_sessions,
    acreate_session,
    adelete_message,
    adelete_messages_after,
    adelete_session,
    aerase_scope,
    aexpire_sessions,
    afork_session,
    aget_erasure,
    aget_session,
    alist_messages,
    alist_sessions,
    alist_sessions_page,
    amake_default,
    apatch_session,
    apop_message,
    aprune_idempotency_keys,
    arecount_sessions,
    aresolve_session,
    aresume_erasure,
    aset_retention,
    aunarchive_session,
    aupdate_session,
    ausage_totals,
)
from .compaction import compact_session
from .context import MAX_CONTEXT_TOKENS, ContextWindow, context_messages
from .erasure import ERASURE_BATCH, erase_scope, get_erasure, resume_erasure
from .filters import SessionFilters
from .idempotency import prune_idempotency_keys
from .keyset import SessionPage, list_sessions_page
from .lifecycle import (
    PATCHABLE_FIELDS,
    archive_session,
    fork_session,
    patch_session,
    unarchive_session,
)
from .maintenance import CounterDrift, recount_sessions
from .messages import (
    AppendResult,
    MessageInput,
    append_messages,
    check_message_count,
    check_messages,
    clear_messages,
    delete_message,
    list_messages,
)
from .retention import DEFAULT_BATCH_SIZE, ExpiryReport, expire_sessions, set_retention
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
from .totals import GROUP_BY, UsageTotals, usage_totals
from .undo import (
    MessagesDeleted,
    PoppedMessage,
    delete_messages_after,
    pop_message,
)

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "ERASURE_BATCH",
    "GROUP_BY",
    "MAX_CONTEXT_TOKENS",
    "MAX_INT64",
    "ORDERING_FIELDS",
    "PATCHABLE_FIELDS",
    "AppendResult",
    "ContextWindow",
    "CounterDrift",
    "ExpiryReport",
    "MessageInput",
    "MessagesDeleted",
    "PoppedMessage",
    "SessionFilters",
    "SessionPage",
    "UsageTotals",
    "aappend_messages",
    "aarchive_session",
    "aclear_messages",
    "acompact_session",
    "acontext_messages",
    "acount_sessions",
    "acreate_session",
    "adelete_message",
    "adelete_messages_after",
    "adelete_session",
    "aerase_scope",
    "aexpire_sessions",
    "afork_session",
    "aget_erasure",
    "aget_session",
    "alist_messages",
    "alist_sessions",
    "alist_sessions_page",
    "amake_default",
    "apatch_session",
    "apop_message",
    "append_messages",
    "aprune_idempotency_keys",
    "archive_session",
    "arecount_sessions",
    "aresolve_session",
    "aresume_erasure",
    "aset_retention",
    "aunarchive_session",
    "aupdate_session",
    "ausage_totals",
    "check_agent_id",
    "check_message_count",
    "check_messages",
    "clear_messages",
    "compact_session",
    "context_messages",
    "count_sessions",
    "create_session",
    "delete_message",
    "delete_messages_after",
    "delete_session",
    "erase_scope",
    "expire_sessions",
    "fork_session",
    "get_erasure",
    "get_session",
    "list_messages",
    "list_sessions",
    "list_sessions_page",
    "make_default",
    "patch_session",
    "pop_message",
    "prune_idempotency_keys",
    "recount_sessions",
    "resolve_session",
    "resume_erasure",
    "session_queryset",
    "set_retention",
    "unarchive_session",
    "update_session",
    "usage_totals",
]
