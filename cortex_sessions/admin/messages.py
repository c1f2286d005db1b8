"""The message admin: a read-only list and page; deletes go through the services (docs/design.md §7.4).

Deleting calls :func:`~cortex_sessions.services.delete_message`, so the session's counters follow
(docs/design.md §5). A message of an archived session is never deleted (docs/design.md §11.2): the
delete page and the "Delete selected" action answer with an error message, and the action deletes
nothing when any selected message belongs to an archived session (all or nothing).
"""

from __future__ import annotations

import contextlib
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.actions import delete_selected as site_delete_selected
from django.contrib.admin.utils import quote, unquote
from django.db import router, transaction
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from .. import services
from ..content import preview
from ..exceptions import LegalHold, MessageNotFound, SessionArchived, SessionNotFound
from ..models import Message
from .base import (
    TEXT_PREVIEW_CHARS,
    ReadOnlyModelAdmin,
    compaction_label,
    list_datetime,
    pretty_json,
    session_change_link,
    session_label,
    two_lines,
)
from .filters import MessageSessionListFilter

__all__ = ["MessageAdmin"]


@admin.register(Message)
class MessageAdmin(ReadOnlyModelAdmin):
    """Messages: a read-only list filtered by session, role and source (docs/design.md §7.4).

    Nothing is added or changed here. Deleting goes through ``services.delete_message`` so the
    session's counters follow; legacy messages without a session (docs/design.md §4) cannot be deleted.
    """

    list_display = ("id", "text_and_session", "seq", "role", "source", "created")
    actions = ["delete_selected"]  # this class's, in place of the site's
    list_filter = (MessageSessionListFilter, "role", "source")
    list_select_related = ("session",)
    ordering = ("-id",)

    class Media:
        css = {"all": ("cortex_sessions/admin.css",)}

    fields = (
        "session",
        "seq",
        "role",
        "source",
        "agent_id",
        "scope",
        "message_text",
        "pretty_content",
        "pretty_metadata",
        "pretty_usage",
        "token_count",
        "created_at",
        "compaction",
    )
    readonly_fields = fields

    def has_delete_permission(self, request: HttpRequest, obj: Message | None = None) -> bool:
        """The usual permission, except for legacy rows without a session (never deleted)."""
        if obj is not None and obj.session_id is None:
            return False
        return super().has_delete_permission(request, obj)

    def delete_view(
        self, request: HttpRequest, object_id: str, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        """The delete page; a message of an archived session is refused with an error message
        and a redirect to its page, never a 500 (docs/design.md §11.2, §12.5).

        Checked before the confirmation page is shown, and again by the service on the
        confirmed post (the session may be archived in between); the page's transaction,
        history entry included, is rolled back then.
        """
        obj = self.get_object(request, unquote(object_id))
        if obj is not None and obj.session is not None and obj.session.archived_at is not None:
            return self._refuse_archived(request, SessionArchived(), obj)
        if obj is not None and obj.session is not None and obj.session.legal_hold:
            return self._refuse_archived(request, LegalHold(), obj)  # frozen (§18.1)
        try:
            return super().delete_view(request, object_id, extra_context)
        except (SessionArchived, LegalHold) as exc:
            return self._refuse_archived(request, exc, obj)

    def _refuse_archived(
        self, request: HttpRequest, exc: SessionArchived | LegalHold, obj: Message | None
    ) -> HttpResponse:
        self.message_user(request, exc.message, messages.ERROR)
        if obj is None:
            return HttpResponseRedirect(
                reverse(f"{self.admin_site.name}:cortex_sessions_message_changelist")
            )
        return HttpResponseRedirect(
            reverse(f"{self.admin_site.name}:cortex_sessions_message_change", args=[quote(obj.pk)])
        )

    def delete_model(self, request: HttpRequest, obj: Message) -> None:
        """Delete one message through ``services.delete_message``; the counters follow.

        Raises:
            SessionArchived: the session is archived (caught by :meth:`delete_view`).
        """
        if obj.session is None or obj.seq is None:  # a legacy row: never deleted
            return
        with contextlib.suppress(SessionNotFound, MessageNotFound):  # already gone
            services.delete_message(scope=obj.session.scope, session_id=obj.session.pk, seq=obj.seq)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Message]) -> None:
        """Delete each selected message through ``services.delete_message``, all in one
        transaction (sessions locked in id order).

        Raises:
            SessionArchived: a selected message's session is archived; nothing is deleted.
        """
        rows = (
            queryset.filter(session__isnull=False)
            .order_by("session_id", "seq")
            .values_list("session_id", "session__scope", "seq")
        )
        with transaction.atomic(using=router.db_for_write(Message)):
            for session_id, scope, seq in rows:
                if session_id is None or seq is None:  # legacy rows are filtered out above
                    continue
                with contextlib.suppress(SessionNotFound, MessageNotFound):  # deleted meanwhile
                    services.delete_message(scope=scope, session_id=session_id, seq=seq)

    @admin.action(description=_("Delete selected %(verbose_name_plural)s"), permissions=["delete"])
    def delete_selected(
        self, request: HttpRequest, queryset: QuerySet[Message]
    ) -> HttpResponse | None:
        """Django's "Delete selected" (this class's action of the same name replaces the
        site's), all or nothing: when any selected message belongs to an archived session,
        nothing is deleted and the changelist shows an error naming how many (on the
        confirmation step and on the confirmed post alike)."""
        archived = queryset.filter(session__archived_at__isnull=False).order_by().count()
        if archived:
            self.message_user(
                request,
                ngettext(
                    "%(count)d selected message belongs to an archived session, which is "
                    "read-only: nothing was deleted. Unarchive it or leave it out.",
                    "%(count)d selected messages belong to archived sessions, which are "
                    "read-only: nothing was deleted. Unarchive them or leave them out.",
                    archived,
                )
                % {"count": archived},
                messages.ERROR,
            )
            return None
        held = queryset.filter(session__legal_hold=True).order_by().count()
        if held:  # a session on legal hold has its messages frozen (docs/design.md §18.1)
            self.message_user(
                request,
                ngettext(
                    "%(count)d selected message belongs to a session on legal hold: nothing "
                    "was deleted.",
                    "%(count)d selected messages belong to sessions on legal hold: nothing "
                    "was deleted.",
                    held,
                )
                % {"count": held},
                messages.ERROR,
            )
            return None
        try:
            # The history entries are written before the deletes: one transaction for both.
            with transaction.atomic(using=router.db_for_write(Message)):
                return site_delete_selected(self, request, queryset)
        except (SessionArchived, LegalHold) as exc:  # after the check: everything rolled back
            self.message_user(request, f"{exc.message} Nothing was deleted.", messages.ERROR)
            return None

    @admin.display(description=_("text and session"))
    def text_and_session(self, obj: Message) -> str:
        """The message's text over its session's title, linked to the session's page.

        Each line is cut by the stylesheet to the column, which at 1366 px keeps about 40
        characters of each, and holds its whole text as a tooltip (the text up to
        ``TEXT_PREVIEW_CHARS`` characters). A legacy row without a session shows the admin's
        empty value on the second line.
        """
        text = preview(obj.text, TEXT_PREVIEW_CHARS) or "\u00a0"
        if obj.session is None:
            return two_lines(text, self.get_empty_value_display())
        link = session_change_link(self.admin_site, obj.session.pk, session_label(obj.session))
        return two_lines(text, link, second_tip=obj.session.title or obj.session.pk)

    @admin.display(description=_("created"), ordering="created_at")
    def created(self, obj: Message) -> str:
        """``created_at`` in the current time zone, the date over the time (``HH:MM``)."""
        return list_datetime(obj.created_at)

    @admin.display(description=_("text"))
    def message_text(self, obj: Message) -> str:
        """The message's whole text (its text blocks joined by newlines, docs/design.md §3.2)."""
        return obj.text

    @admin.display(description=_("content"))
    def pretty_content(self, obj: Message) -> str:
        """The content blocks as indented JSON, long strings wrapped, never clipped (``admin.css``)."""
        return pretty_json(obj.content)

    @admin.display(description=_("metadata"))
    def pretty_metadata(self, obj: Message) -> str:
        """The host's metadata as indented JSON, like the content."""
        return pretty_json(obj.metadata)

    @admin.display(description=_("compaction"))
    def compaction(self, obj: Message) -> str:
        """Which seqs a compaction summary stands for (docs/design.md §16.3); else empty."""
        return compaction_label(obj)

    @admin.display(description=_("usage"))
    def pretty_usage(self, obj: Message) -> str:
        """The message's usage (docs/design.md §16.1) as indented JSON; "-" when it has none."""
        return "-" if obj.usage is None else pretty_json(obj.usage)
