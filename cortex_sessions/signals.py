"""Signals of docs/design.md §9, sent after the transaction that made the change commits (under
manual transaction management, where the host commits when it chooses, at the write: §12.2).

- ``session_created(sender=Session, session)``
- ``messages_appended(sender=Session, session, messages)``: ``messages`` is the list of new rows.
- ``session_deleted(sender=Session, session_id, agent_id, scope)``: ``scope`` is canonical.
"""

from __future__ import annotations

from django.dispatch import Signal

__all__ = ["messages_appended", "session_created", "session_deleted"]

session_created = Signal()
messages_appended = Signal()
session_deleted = Signal()
