"""Django admin for sessions and messages (docs/design.md §7.4), one module per concern.

Operators browse, search and filter sessions and messages, edit a session's host-owned fields
(``title``, ``metadata``, ``cwd``), create sessions, make one the default, repair counters and
delete. Every write goes through :mod:`cortex_sessions.services`:

- creating calls :func:`~cortex_sessions.services.create_session`, editing calls
  :func:`~cortex_sessions.services.update_session` with the changed fields only
  (:mod:`.sessions`);
- "Make default" calls :func:`~cortex_sessions.services.make_default`, "Recount messages" calls
  :func:`~cortex_sessions.services.recount_sessions` (:mod:`.actions`);
- deleting a session calls :func:`~cortex_sessions.services.delete_session`, deleting a message
  :func:`~cortex_sessions.services.delete_message`, so the counters follow (docs/design.md §5);
  a message of an archived session is never deleted (docs/design.md §11.2, :mod:`.messages`).

No form here has a field for the counters, ``last_message``, ``last_seq`` or ``backfilled_by``,
and the change form has none for ``agent_id``, ``scope`` or ``is_default``: whatever a request
posts for them is ignored. Messages are read-only; the session page shows only the newest
:data:`INLINE_MESSAGES` of them and links to the message list for the rest, so a session with
10,000 messages opens as fast as one with ten (:mod:`.inlines`).

The modules: :mod:`.changelists` (checked input and bounded counts every changelist shares,
docs/design.md §12.5), :mod:`.base` (read-only admins, session links, list cells),
:mod:`.filters`, :mod:`.inlines`, :mod:`.sessions`, :mod:`.actions`, :mod:`.messages` and
:mod:`.imports` and :mod:`.erasures` (erasure records, read-only). Importing this package registers the model admins with the default site, as
Django's admin autodiscovery expects of ``cortex_sessions.admin``.
"""

from __future__ import annotations

from .actions import RECOUNT_REPORT_LIMIT
from .base import LIST_PREVIEW_CHARS, TEXT_PREVIEW_CHARS, TITLE_PREVIEW_CHARS, ReadOnlyModelAdmin
from .changelists import (
    COUNT_LIMIT,
    BoundedCountPaginator,
    CheckedInputAdminMixin,
    DeclaredFiltersChangeList,
)
from .erasures import ErasureAdmin
from .filters import ArchivedListFilter, BackfilledListFilter, MessageSessionListFilter
from .imports import ImportedConversationAdmin
from .inlines import INLINE_MESSAGES, MessageInline, NewestMessagesFormSet
from .messages import MessageAdmin
from .sessions import SessionAdmin

__all__ = [
    "COUNT_LIMIT",
    "INLINE_MESSAGES",
    "LIST_PREVIEW_CHARS",
    "RECOUNT_REPORT_LIMIT",
    "TEXT_PREVIEW_CHARS",
    "TITLE_PREVIEW_CHARS",
    "ArchivedListFilter",
    "BackfilledListFilter",
    "BoundedCountPaginator",
    "CheckedInputAdminMixin",
    "DeclaredFiltersChangeList",
    "ErasureAdmin",
    "ImportedConversationAdmin",
    "MessageAdmin",
    "MessageInline",
    "MessageSessionListFilter",
    "NewestMessagesFormSet",
    "ReadOnlyModelAdmin",
    "SessionAdmin",
]
