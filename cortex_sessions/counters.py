"""Computing ``last_message`` from message rows (docs/design.md §5), for services and the backfill.

Works on any Message queryset, including a migration's historical model.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from django.db.models import Q

from .conf import app_settings
from .content import content_text, is_conversation, preview

__all__ = [
    "CONVERSATION_Q",
    "last_message_of",
    "last_message_of_rows",
    "newest_conversation_text",
]

#: Conversation messages (docs/design.md §3.2) as a query predicate.
CONVERSATION_Q = Q(role="assistant") | Q(role="user", source__in=["user", "checkpoint"])


def last_message_of(role: str, source: str, content: Any) -> str:
    """The ``last_message`` one message gives: the preview of its text if it is a conversation
    message (docs/design.md §3.2) with non-blank text, else ``""`` (docs/design.md §5).

    Returns:
        The text cut to ``LAST_MESSAGE_PREVIEW_CHARS`` characters with ``…`` when cut, or ``""``.
    """
    if not is_conversation(role, source):
        return ""
    text = content_text(content)
    return preview(text, app_settings.LAST_MESSAGE_PREVIEW_CHARS) if text.strip() else ""


def last_message_of_rows(rows: Sequence[Mapping[str, Any]]) -> str | None:
    """The ``last_message`` an append of ``rows`` sets: :func:`last_message_of` of the newest
    row that gives one (docs/design.md §5), or ``None`` when none does (the session keeps its
    own).

    Args:
        rows: the appended messages' column values (``role``, ``source``, ``content``), in seq
            order.
    """
    for row in reversed(rows):
        if text := last_message_of(row["role"], row["source"], row["content"]):
            return text
    return None


def newest_conversation_text(messages: Any) -> str:
    """``last_message`` for a session's messages: the preview of the newest conversation message
    with non-blank text, or ``""`` when there is none (docs/design.md §5).

    Args:
        messages: a queryset of one session's messages (any Message model with ``seq``).

    Returns:
        The text cut to ``LAST_MESSAGE_PREVIEW_CHARS`` characters with ``…`` when cut.

    Reads newest first in chunks and stops at the first hit, so it does not load the session.
    """
    rows = messages.filter(CONVERSATION_Q).order_by("-seq").values_list("role", "source", "content")
    for role, source, content in rows.iterator(chunk_size=50):
        if last := last_message_of(role, source, content):
            return last
    return ""
