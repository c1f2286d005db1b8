"""The session admin: browse, search, filter, edit host-owned fields, repair (docs/design.md §7.4).

Creating calls :func:`~cortex_sessions.services.create_session`, editing calls
:func:`~cortex_sessions.services.update_session` with the changed host-owned fields only, deleting
calls :func:`~cortex_sessions.services.delete_session`; the actions are in
:mod:`cortex_sessions.admin.actions`.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import Count, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.text import capfirst
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from .. import services
from ..content import preview
from ..exceptions import CortexSessionsError, LegalHold, SessionNotFound
from ..forms import SessionAddForm, SessionChangeForm
from ..models import Message, Session
from .actions import SessionActionsMixin
from .base import (
    LIST_PREVIEW_CHARS,
    TITLE_PREVIEW_CHARS,
    list_datetime,
    parse_uuid,
    session_change_link,
    two_lines,
)
from .changelists import CheckedInputAdminMixin
from .filters import ArchivedListFilter, BackfilledListFilter, ExpiredListFilter
from .inlines import MessageInline

__all__ = ["SessionAdmin"]

_EDITABLE_FIELDS = ("title", "metadata", "cwd")
#: The host's retention controls, written through ``services.set_retention`` (§18.1).
_RETENTION_FIELDS = ("expires_at", "legal_hold")
#: Shown read-only at the top of a session's page.
_IDENTITY_FIELDS = ("id", "agent_id", "scope", "is_default")
#: Shown read-only under "Kept by cortex_sessions": nothing posted for them is ever saved.
_APP_OWNED_FIELDS = (
    "message_count",
    "last_message",
    "last_seq",
    "all_messages",
    "backfilled_by",
    "archived_at",
    "fork_source",
    "forked_at_seq",
    "input_tokens",
    "output_tokens",
    "cost",
    "context_tokens",
    "created_at",
    "updated_at",
)


@admin.register(Session)
class SessionAdmin(SessionActionsMixin, CheckedInputAdminMixin):
    """Sessions: browse, search, filter, edit host-owned fields, and repair (docs/design.md §7.4)."""

    form = SessionChangeForm
    add_form = SessionAddForm
    list_display = (
        "display_title",
        "scope_and_agent",
        "is_default",
        "message_count",
        "updated",
    )
    list_filter = (
        "is_default",
        ArchivedListFilter,
        BackfilledListFilter,
        "legal_hold",
        ExpiredListFilter,
        "agent_id",
    )
    search_fields = ("title", "agent_id")
    search_help_text = _("Title or agent id; paste a session id to find that session.")
    ordering = ("-updated_at",)
    date_hierarchy = "created_at"
    inlines = (MessageInline,)
    actions = ("make_default", "recount_messages", "archive_sessions", "unarchive_sessions")

    class Media:
        css = {"all": ("cortex_sessions/admin.css",)}

    add_fieldsets = (
        (None, {"fields": ("agent_id", "scope", "is_default")}),
        (_("Host-owned"), {"fields": ("title", "cwd", "metadata")}),
    )
    change_fieldsets = (
        (None, {"fields": _IDENTITY_FIELDS}),
        (_("Host-owned"), {"fields": ("title", "cwd", "metadata")}),
        (_("Retention"), {"fields": _RETENTION_FIELDS}),
        (_("Kept by cortex_sessions"), {"fields": _APP_OWNED_FIELDS}),
    )
    change_readonly_fields = _IDENTITY_FIELDS + _APP_OWNED_FIELDS

    # -- forms and pages --------------------------------------------------------------------------

    def get_fieldsets(self, request: HttpRequest, obj: Session | None = None) -> Any:
        """Agent, scope and default when adding; the full, mostly read-only page when changing."""
        return self.add_fieldsets if obj is None else self.change_fieldsets

    def get_readonly_fields(self, request: HttpRequest, obj: Session | None = None) -> Any:
        """On an existing session all but ``title``, ``metadata`` and ``cwd`` is read-only."""
        return () if obj is None else self.change_readonly_fields

    def get_form(
        self, request: HttpRequest, obj: Session | None = None, change: bool = False, **kwargs: Any
    ) -> Any:
        """:class:`SessionAddForm` when adding, :class:`SessionChangeForm` when changing."""
        if obj is None:
            kwargs["form"] = self.add_form
        return super().get_form(request, obj, change=change, **kwargs)

    def get_inlines(self, request: HttpRequest, obj: Session | None) -> Any:
        """Messages are shown for an existing session only."""
        return self.inlines if obj is not None else ()

    def changeform_view(
        self,
        request: HttpRequest,
        object_id: str | None = None,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        """The add/change page; a service refusal on save becomes a message, never a crash.

        The forms validate what the services check, so this only catches what changed between
        validation and save (a concurrent default, a session deleted meanwhile). The page's
        transaction has been rolled back by then.
        """
        try:
            return super().changeform_view(request, object_id, form_url, extra_context)
        except CortexSessionsError as exc:
            self.message_user(request, exc.message, messages.ERROR)
            return HttpResponseRedirect(request.get_full_path())

    def save_model(self, request: HttpRequest, obj: Session, form: Any, change: bool) -> None:
        """Create through ``services.create_session``; edit through ``services.update_session``.

        Only the host-owned fields the operator changed are sent, at the session's own scope.
        """
        if change:
            changed = set(form.changed_data)
            retention = {
                name: form.cleaned_data[name] for name in _RETENTION_FIELDS if name in changed
            }
            changes = {
                name: form.cleaned_data[name] for name in _EDITABLE_FIELDS if name in changed
            }
            if not changes and not retention:
                return
            if retention:  # first: it also finds an expired session (§18.1)
                saved = services.set_retention(scope=obj.scope, session_id=obj.pk, **retention)
            if changes:
                saved = services.update_session(scope=obj.scope, session_id=obj.pk, **changes)
        else:
            data = form.cleaned_data
            saved = services.create_session(
                scope=data["scope"],
                agent_id=data["agent_id"],
                title=data.get("title", ""),
                metadata=data.get("metadata") or {},
                cwd=data.get("cwd"),
                is_default=data.get("is_default", False),
            )
        # The admin goes on with ``obj`` (history, redirect): give it the stored state.
        for model_field in Session._meta.concrete_fields:
            setattr(obj, model_field.attname, getattr(saved, model_field.attname))
        obj._state.adding = False
        obj._state.db = saved._state.db

    def delete_model(self, request: HttpRequest, obj: Session) -> None:
        """Delete the session with its messages through ``services.delete_session``; a
        session put on legal hold since the confirmation page is kept, with an error."""
        self.delete_queryset(request, Session.objects.filter(pk=obj.pk))

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Session]) -> None:
        """Delete each selected session with its messages through ``services.delete_session``.

        The confirmation page refuses a selection holding a session on legal hold
        (:meth:`get_deleted_objects`); one held after it was shown is kept and named in an
        error message (docs/design.md §18.1).
        """
        held = []
        for session_id, scope in queryset.order_by().values_list("pk", "scope"):
            try:
                services.delete_session(scope=scope, session_id=session_id)
            except SessionNotFound:  # deleted meanwhile (or expired: the sweep's to delete)
                continue
            except LegalHold:
                held.append(str(session_id))
        if held:
            self.message_user(
                request,
                _("Kept on legal hold, not deleted: %(ids)s.") % {"ids": ", ".join(held)},
                messages.ERROR,
            )

    def get_deleted_objects(self, objs: Any, request: HttpRequest) -> Any:
        """Summarize what a delete removes: each session and how many messages it has.

        Django's default lists every related row, which for a long session means rendering
        (and loading) thousands of messages; one count query is enough here.
        """
        sessions = list(objs)
        if not sessions:
            return [], {}, set(), []
        counts = dict(
            Message.objects.filter(session__in=[session.pk for session in sessions])
            .order_by()
            .values("session")
            .annotate(n=Count("pk"))
            .values_list("session", "n")
        )
        opts = self.opts
        perms_needed: set[Any] = set()
        deleted: list[Any] = []
        # A session on legal hold is never deleted (docs/design.md §18.1): listed as
        # protected, Django refuses the whole delete and says why.
        protected = [
            format_html(
                "{}: {} ({})",
                capfirst(opts.verbose_name),
                session_change_link(self.admin_site, session.pk, session),
                _("on legal hold"),
            )
            for session in sessions
            if session.legal_hold
        ]
        total = 0
        for session in sessions:
            if not self.has_delete_permission(request, session):
                perms_needed.add(opts.verbose_name)
            deleted.append(
                format_html(
                    "{}: {}",
                    capfirst(opts.verbose_name),
                    session_change_link(self.admin_site, session.pk, session),
                )
            )
            count = counts.get(session.pk, 0)
            if count:
                total += count
                deleted.append(
                    [ngettext("%(count)d message", "%(count)d messages", count) % {"count": count}]
                )
        if (
            total
            and self.admin_site.is_registered(Message)
            and not self.admin_site.get_model_admin(Message).has_delete_permission(request)
        ):
            perms_needed.add(Message._meta.verbose_name)
        model_count = {opts.verbose_name_plural: len(sessions)}
        if total:
            model_count[Message._meta.verbose_name_plural] = total
        return deleted, model_count, perms_needed, protected

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Session], search_term: str
    ) -> tuple[QuerySet[Session], bool]:
        """Search title and agent id; a search term that is a UUID also finds that session."""
        results, may_have_duplicates = super().get_search_results(request, queryset, search_term)
        session_id = parse_uuid(search_term) if search_term.strip() else None
        if session_id is not None:
            results = results | queryset.filter(pk=session_id)
        return results, may_have_duplicates

    # -- columns and read-only fields -------------------------------------------------------------

    @admin.display(description=_("title and last message"), ordering="title")
    def display_title(self, obj: Session) -> str:
        """The title over the start of ``last_message``, each one line (``admin.css``).

        The title is cut to :data:`~cortex_sessions.admin.base.TITLE_PREVIEW_CHARS` characters
        and the stylesheet cuts both lines to the column, which at 1366 px keeps at least 40
        characters of the title; each line's tooltip holds its whole text. An untitled session
        shows a placeholder so it still has a link. Badges mark an archived session
        (docs/design.md §11.2), one the default-session backfill created (docs/design.md §4),
        one on legal hold and one expired but not swept yet (docs/design.md §18.1).
        """
        title = preview(obj.title, TITLE_PREVIEW_CHARS) if obj.title else str(_("(untitled)"))
        now = timezone.now()
        badges = format_html_join(
            "",
            '<span class="cortex-badge">{}</span> ',
            (
                (label,)
                for label, shown in (
                    (_("archived"), obj.archived_at is not None),
                    (_("backfilled"), bool(obj.backfilled_by)),
                    (_("legal hold"), obj.legal_hold),
                    (_("expired"), obj.expires_at is not None and obj.expires_at <= now),
                )
                if shown
            ),
        )
        return two_lines(
            format_html("{}{}", badges, title),
            preview(obj.last_message, LIST_PREVIEW_CHARS) or "\u00a0",
            first_tip=obj.title,
            second_tip=obj.last_message,
        )

    @admin.display(description=_("scope and agent"), ordering="scope")
    def scope_and_agent(self, obj: Session) -> str:
        """The scope over the agent id, each one line with its whole text as a tooltip."""
        return two_lines(obj.scope, obj.agent_id)

    @admin.display(description=_("updated"), ordering="updated_at")
    def updated(self, obj: Session) -> str:
        """``updated_at`` in the current time zone, the date over the time (``HH:MM``)."""
        return list_datetime(obj.updated_at)

    @admin.display(description=_("forked from"))
    def fork_source(self, obj: Session) -> str:
        """The session this one was forked from, linked while it exists (docs/design.md §11.1);
        its bare id once it was deleted; empty for a session that is no fork."""
        if obj.forked_from is None:
            return self.get_empty_value_display()
        source = Session.objects.filter(pk=obj.forked_from).only("id", "title").first()
        if source is None:
            return format_html("{} {}", obj.forked_from, _("(deleted)"))
        return session_change_link(self.admin_site, source.pk, source)

    @admin.display(description=_("all messages"))
    def all_messages(self, obj: Session) -> str:
        """A link to the message list filtered by this session."""
        url = reverse(f"{self.admin_site.name}:cortex_sessions_message_changelist")
        return format_html(
            '<a href="{}?session={}">{}</a>',
            url,
            obj.pk,
            ngettext(
                "View the %(count)d message in the message list",
                "View all %(count)d messages in the message list",
                obj.message_count,
            )
            % {"count": obj.message_count},
        )
