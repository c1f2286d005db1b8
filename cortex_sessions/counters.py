"""Computing ``last_message`` from message rows (DESIGN §5), for services and the backfill.

Works on any Message queryset, including a migration's historical model.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Q

from .conf import app_settings
from .content import content_text, preview

__all__ = ["CONVERSATION_Q", "newest_conversation_text"]

#: Conversation messages (DESIGN §3.2) as a query predicate.
CONVERSATION_Q = Q(role="assistant") | Q(role="user", source__in=["user", "checkpoint"])


def newest_conversation_text(messages: Any) -> str:
    """``last_message`` for a session's messages: the preview of the newest conversation message
    with non-blank text, or ``""`` when there is none (DESIGN §5).

    Args:
        messages: a queryset of one session's messages (any Message model with ``seq``).

    Returns:
        The text cut to ``LAST_MESSAGE_PREVIEW_CHARS`` characters with ``…`` when cut.

    Reads newest first in chunks and stops at the first hit, so it does not load the session.
    """
    rows = messages.filter(CONVERSATION_Q).order_by("-seq").values_list("content", flat=True)
    for content in rows.iterator(chunk_size=50):
        text = content_text(content)
        if text.strip():
            return preview(text, app_settings.LAST_MESSAGE_PREVIEW_CHARS)
    return ""
