"""Helpers the app's model admins share: read-only admins, session links, list cells (docs/design.md §7.4)."""

from __future__ import annotations

import json
import uuid
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.contrib.admin.utils import quote
from django.http import HttpRequest
from django.urls import reverse
from django.utils import formats, timezone
from django.utils.html import format_html

from ..content import preview
from ..models import Message, Session
from .changelists import CheckedInputAdminMixin

if TYPE_CHECKING:
    from django.contrib.admin import AdminSite

__all__ = [
    "LIST_PREVIEW_CHARS",
    "TEXT_PREVIEW_CHARS",
    "TITLE_PREVIEW_CHARS",
    "ReadOnlyModelAdmin",
    "compaction_label",
    "list_datetime",
    "parse_uuid",
    "pretty_json",
    "session_change_link",
    "session_label",
    "two_lines",
]

#: Characters of ``last_message`` shown in the session list (the stylesheet may cut it sooner).
LIST_PREVIEW_CHARS = 120
#: Characters of a message's text shown in lists and in the inline.
TEXT_PREVIEW_CHARS = 200
#: Characters of a session's title sent to a list cell (the stylesheet cuts it to the column's
#: width, at least 40 characters at 1366 px; the cell's tooltip holds the whole title).
TITLE_PREVIEW_CHARS = 120


def parse_uuid(value: str | None) -> uuid.UUID | None:
    """``value`` as a UUID (surrounding space ignored), or ``None`` when it is not one."""
    try:
        return uuid.UUID(str(value).strip())
    except (TypeError, ValueError, AttributeError):
        return None


def session_change_link(admin_site: AdminSite, session_id: Any, label: Any) -> str:
    """An ``<a>`` to the session's change page on ``admin_site``, reading ``label`` (escaped).

    Args:
        admin_site: the site the link stays on (its ``name`` is the URL namespace).
        session_id: the session's primary key (a UUID or its text).
        label: what the link reads, e.g. the session itself (its title or id).

    Returns:
        Safe HTML.
    """
    url = reverse(f"{admin_site.name}:cortex_sessions_session_change", args=[quote(session_id)])
    return format_html('<a href="{}">{}</a>', url, label)


def session_label(session: Session) -> str:
    """What a list cell shows of a session: its title cut to :data:`TITLE_PREVIEW_CHARS`
    characters (``…`` appended when cut), or its id when it has no title."""
    return preview(session.title, TITLE_PREVIEW_CHARS) if session.title else str(session.pk)


def two_lines(first: Any, second: Any, *, first_tip: Any = None, second_tip: Any = None) -> str:
    """A list cell of two one-line ``<span class="cortex-line">``, the second quieter
    (``cortex-preview``); ``admin.css`` cuts each with an ellipsis (docs/admin.md).

    Args:
        first, second: what each line shows, escaped unless already safe HTML.
        first_tip, second_tip: each line's ``title`` tooltip (the whole text); ``None`` is
            the line's own text.

    Returns:
        Safe HTML.
    """
    return format_html(
        '<span class="cortex-line" title="{}">{}</span>'
        '<span class="cortex-line cortex-preview" title="{}">{}</span>',
        first if first_tip is None else first_tip,
        first,
        second if second_tip is None else second_tip,
        second,
    )


def list_datetime(value: datetime) -> str:
    """``value`` in the current time zone as ``YYYY-MM-DD`` over ``HH:MM`` (:func:`two_lines`),
    narrow enough to leave the titles their room at 1366 px; safe HTML."""
    local = timezone.localtime(value)
    return two_lines(formats.date_format(local, "Y-m-d"), formats.date_format(local, "H:i"))


def pretty_json(value: Any) -> str:
    """``value`` as indented JSON in a ``<pre class="cortex-json">``, wrapped by ``admin.css``
    (long strings wrap, nothing is clipped); safe HTML."""
    return format_html(
        '<pre class="cortex-json">{}</pre>', json.dumps(value, indent=2, ensure_ascii=False)
    )


class ReadOnlyModelAdmin(CheckedInputAdminMixin):
    """A model admin that views, searches and (with the usual permission) deletes, but never adds
    or changes: the rows are written by the app's services only (NUL-safe input, bounded counts
    from :class:`~cortex_sessions.admin.changelists.CheckedInputAdminMixin`)."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        """Always ``False``: rows are written by the app's services, never in the admin."""
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """Always ``False``: rows are immutable here."""
        return False


def compaction_label(message: Message) -> str:
    """What a compaction summary stands for, e.g. "summary of 1–40" (docs/design.md §16.3):
    every message up to its ``compacts_through_seq``; empty for any other message."""
    through = message.compacts_through_seq
    return "" if through is None else f"summary of 1\u2013{through}"
