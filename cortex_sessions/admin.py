"""Django admin for sessions and messages (docs/design.md §7.4).

Operators browse, search and filter sessions and messages, edit a session's host-owned fields
(``title``, ``metadata``, ``cwd``), create sessions, make one the default, repair counters and
delete. Every write goes through :mod:`cortex_sessions.services`:

- creating calls :func:`~cortex_sessions.services.create_session`, editing calls
  :func:`~cortex_sessions.services.update_session` with the changed fields only;
- "Make default" calls :func:`~cortex_sessions.services.make_default`, "Recount messages" calls
  :func:`~cortex_sessions.services.recount_sessions`;
- deleting a session calls :func:`~cortex_sessions.services.delete_session`, deleting a message
  :func:`~cortex_sessions.services.delete_message`, so the counters follow (docs/design.md §5).
  A message of an archived session is never deleted (docs/design.md §11.2): the delete page and
  the "Delete selected" action answer with an error message, and the action deletes nothing
  when any selected message belongs to an archived session (all or nothing).

No form here has a field for the counters, ``last_message``, ``last_seq`` or ``backfilled_by``,
and the change form has none for ``agent_id``, ``scope`` or ``is_default``: whatever a request
posts for them is ignored. Messages are read-only; the session page shows only the newest
:data:`INLINE_MESSAGES` of them and links to the message list for the rest, so a session with
10,000 messages opens as fast as one with ten.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections import defaultdict
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.actions import delete_selected
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.utils import quote, unquote
from django.contrib.admin.views.main import ERROR_FLAG, ChangeList
from django.core.exceptions import ValidationError
from django.core.paginator import Paginator
from django.db import connections, router, transaction
from django.db.models import Count, QuerySet
from django.forms.models import BaseInlineFormSet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.utils import formats, timezone
from django.utils.functional import cached_property
from django.utils.html import format_html
from django.utils.text import capfirst
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from . import services
from .content import preview
from .exceptions import CortexSessionsError, MessageNotFound, SessionArchived, SessionNotFound
from .forms import SessionAddForm, SessionChangeForm
from .models import ImportedConversation, Message, Session

if TYPE_CHECKING:
    _Paginator = Paginator[Any]
    _ModelAdmin = admin.ModelAdmin[Any]
    _MessageInlineFormSet = BaseInlineFormSet[Message, Session, Any]
    _MessageTabularInline = admin.TabularInline[Message, Session]
else:  # these Django classes are not subscriptable at run time
    _Paginator = Paginator
    _ModelAdmin = admin.ModelAdmin
    _MessageInlineFormSet = BaseInlineFormSet
    _MessageTabularInline = admin.TabularInline

__all__ = [
    "COUNT_LIMIT",
    "INLINE_MESSAGES",
    "ArchivedListFilter",
    "BackfilledListFilter",
    "BoundedCountPaginator",
    "CheckedInputAdminMixin",
    "DeclaredFiltersChangeList",
    "ImportedConversationAdmin",
    "MessageAdmin",
    "MessageInline",
    "MessageSessionListFilter",
    "NewestMessagesFormSet",
    "SessionAdmin",
]

#: How many of a session's newest messages its admin page shows inline.
INLINE_MESSAGES = 50
#: Characters of ``last_message`` shown in the session list (the stylesheet may cut it sooner).
LIST_PREVIEW_CHARS = 120
#: Characters of a message's text shown in lists and in the inline.
TEXT_PREVIEW_CHARS = 200
#: Most repaired sessions named one by one in the "Recount messages" report.
RECOUNT_REPORT_LIMIT = 10

#: Most rows a changelist counts exactly; past it the count is an estimate (docs/design.md §12.5).
COUNT_LIMIT = 10_000

_EDITABLE_FIELDS = ("title", "metadata", "cwd")


def _parse_uuid(value: str | None) -> uuid.UUID | None:
    try:
        return uuid.UUID(str(value).strip())
    except (TypeError, ValueError, AttributeError):
        return None


# -- input checks and counting every changelist shares (docs/design.md §12.5) ---------------------


class BoundedCountPaginator(_Paginator):
    """A paginator that never counts more than :data:`COUNT_LIMIT` rows exactly.

    The count is ``SELECT COUNT(*) FROM (… LIMIT COUNT_LIMIT + 1)``, so a list over millions of
    rows costs what a list over ten thousand does. Past the limit, an unfiltered list on
    PostgreSQL reports the planner's estimate (``pg_class.reltuples``), any other list
    :data:`COUNT_LIMIT`; the later pages stay reachable through filters and search.
    """

    @cached_property
    def count(self) -> int:
        """Exact up to :data:`COUNT_LIMIT`, else an estimate (at least :data:`COUNT_LIMIT`)."""
        queryset = self.object_list
        if not isinstance(queryset, QuerySet):
            return super().count
        bounded = queryset.order_by()[: COUNT_LIMIT + 1].count()
        if bounded <= COUNT_LIMIT:
            return bounded
        return max(COUNT_LIMIT, _estimated_rows(queryset) or 0)


def _estimated_rows(queryset: QuerySet[Any]) -> int | None:
    """The planner's row estimate of an unfiltered table on PostgreSQL, else ``None``."""
    connection = connections[queryset.db]
    if connection.vendor != "postgresql" or queryset.query.where:
        return None
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT reltuples::bigint FROM pg_class WHERE oid = %s::regclass",
            [queryset.model._meta.db_table],
        )
        row = cursor.fetchone()
    return int(row[0]) if row and row[0] and row[0] > 0 else None


def _has_nul(values: Any) -> bool:
    return any("\x00" in value for _key, items in values.lists() for value in items) or any(
        "\x00" in key for key in values
    )


class DeclaredFiltersChangeList(ChangeList):
    """A changelist that filters only through its declared ``list_filter`` and ``date_hierarchy``.

    Django hands any query parameter naming a local field with a lookup (``?title__regex=(``,
    ``?metadata__contains=x``, ``?created_at__year=99999999999``) to ``QuerySet.filter()``,
    where the database may fail with a 500 (an invalid regular expression, a JSON lookup
    SQLite does not support, an overflowing date). Here every parameter that is not one of
    the declared filters' (or a declared field filter's name, alone or with ``__exact``), the date
    hierarchy's, or Django's own (search ``q``, ordering
    ``o``, page ``p``, ``all``, popup and facet flags) raises
    :class:`~django.contrib.admin.options.IncorrectLookupParameters`, which the changelist
    answers with its usual redirect to ``?e=1`` (docs/design.md §12.5). A date hierarchy
    value that is not a date Python can count from (year 99999999999, year 9999's last day)
    is refused the same way.
    """

    def get_filters(self, request: HttpRequest) -> tuple[Any, ...]:
        """Django's filters, refusing parameters no declared filter consumed.

        Returns Django's ``(filter_specs, has_filters, remaining_lookup_params,
        may_have_duplicates, has_active_filters)``; raises ``IncorrectLookupParameters``.
        """
        try:
            result = super().get_filters(request)
        except (OverflowError, ValueError) as error:
            raise IncorrectLookupParameters(error) from error
        remaining: dict[str, Any] = result[2]  # lists of values (the stubs say bool | str)
        bounds = (
            {f"{self.date_hierarchy}__gte", f"{self.date_hierarchy}__lt"}
            if self.date_hierarchy
            else set()
        )
        # A declared field filter's bare name (``?role=user``, ``?role__exact=user``) is equality, which
        # Django checks against the field's type; links and bookmarks use it.
        paths = {
            entry if isinstance(entry, str) else entry[0]
            for entry in self.list_filter
            if isinstance(entry, (str, tuple, list))
        }
        equalities = paths | {f"{path}__exact" for path in paths}
        for key, values in remaining.items():
            if key in equalities:
                continue
            # The date hierarchy turns its year/month/day into datetime bounds; a client's
            # own ``created_at__gte`` arrives as text and is refused like any other lookup.
            if key not in bounds or not all(isinstance(value, datetime) for value in values):
                raise IncorrectLookupParameters(f"Filtering by {key} is not offered.")
        return result


class CheckedInputAdminMixin(_ModelAdmin):
    """Changelist input that never reaches the database unchecked (docs/design.md §12.5).

    - Only the declared filters filter (:class:`DeclaredFiltersChangeList`): any other
      field lookup in the query string (``?title__regex=(``) redirects to ``?e=1``, for a
      page and for an action posted to it alike.

    - A query string holding a NUL character (in a filter, the search box, the ordering or the
      page) is answered like any other bad lookup: a redirect to ``?e=1``. PostgreSQL cannot
      compare text with NUL, so this would otherwise be a 500.
    - An action posted with a selection holding a value that is not a primary key of the
      model, or any NUL, is an error message on the changelist, not a 500.
    - Counts are bounded by :class:`BoundedCountPaginator`.
    """

    paginator = BoundedCountPaginator
    show_full_result_count = False

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        """:class:`DeclaredFiltersChangeList`."""
        return DeclaredFiltersChangeList

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        """The changelist; a NUL anywhere in the query string redirects to ``?e=1``."""
        if _has_nul(request.GET):
            return HttpResponseRedirect(f"{request.path}?{ERROR_FLAG}=1")
        if request.method == "POST" and _has_nul(request.POST):
            self.message_user(request, _("The request holds a NUL character."), messages.ERROR)
            return HttpResponseRedirect(request.get_full_path())
        return super().changelist_view(request, extra_context)

    def response_action(
        self, request: HttpRequest, queryset: QuerySet[Any], *args: Any, **kwargs: Any
    ) -> HttpResponse | None:
        """Run an action, refusing a selection that holds something other than primary keys.

        Django filters the queryset with the posted values as they are, and one the primary
        key cannot hold would fail there with a 500; here it is an error message.
        """
        selected = request.POST.getlist(helpers.ACTION_CHECKBOX_NAME)
        pk_field = self.model._meta.pk
        for value in selected:
            try:
                # As posted: Django filters the queryset with the value untrimmed.
                pk_field.run_validators(pk_field.to_python(value))
            except (ValidationError, TypeError, ValueError):
                self.message_user(
                    request,
                    _("The selection holds an invalid %(name)s id.")
                    % {"name": self.model._meta.verbose_name},
                    messages.ERROR,
                )
                return None
        return super().response_action(request, queryset, *args, **kwargs)

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Any], search_term: str
    ) -> tuple[QuerySet[Any], bool]:
        """Django's search, except that a term holding NUL finds nothing.

        The changelist redirects such a term before it gets here, but the admin's autocomplete
        view (``/admin/autocomplete/?term=``) calls this directly; PostgreSQL cannot compare
        text with NUL, so it would be a 500.
        """
        if "\x00" in search_term:
            return queryset.none(), False
        return super().get_search_results(request, queryset, search_term)


# -- list filters ---------------------------------------------------------------------------------


class BackfilledListFilter(admin.SimpleListFilter):
    """Sessions created by the default-session backfill (``backfilled_by`` set, docs/design.md §4)."""

    title = _("backfilled")
    parameter_name = "backfilled"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        """``yes`` and ``no``."""
        return [("yes", _("Yes")), ("no", _("No"))]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Session]) -> QuerySet[Session]:
        """Keep backfilled sessions (``yes``) or organic ones (``no``)."""
        if self.value() == "yes":
            return queryset.exclude(backfilled_by="")
        if self.value() == "no":
            return queryset.filter(backfilled_by="")
        return queryset


class ArchivedListFilter(admin.SimpleListFilter):
    """Archived sessions (``archived_at`` set) or live ones (docs/design.md §11.2)."""

    title = _("archived")
    parameter_name = "archived"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        """``yes`` and ``no``."""
        return [("yes", _("Yes")), ("no", _("No"))]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        """Keep archived sessions (``yes``) or live ones (``no``)."""
        if self.value() == "yes":
            return queryset.filter(archived_at__isnull=False)
        if self.value() == "no":
            return queryset.filter(archived_at__isnull=True)
        return queryset


class MessageSessionListFilter(admin.SimpleListFilter):
    """Messages of one session, chosen by id in the query string (``?session=<uuid>``).

    Listing every session as a choice would not scale, so the filter only shows up when a
    session is selected, e.g. through the link on a session's page.
    """

    title = _("session")
    parameter_name = "session"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        """The selected session only, labelled with its title (or id)."""
        value = self.value()
        if not value:
            return []
        session_id = _parse_uuid(value)
        session = (
            Session.objects.filter(pk=session_id).only("id", "title").first()
            if session_id
            else None
        )
        return [(value, str(session) if session is not None else value)]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Message]) -> QuerySet[Message]:
        """Keep the messages of the selected session; a malformed id is a lookup error."""
        value = self.value()
        if value is None:
            return queryset
        session_id = _parse_uuid(value)
        if session_id is None:
            raise IncorrectLookupParameters(f"{value!r} is not a session id.")
        return queryset.filter(session_id=session_id)


# -- messages inline on the session page ----------------------------------------------------------


class NewestMessagesFormSet(_MessageInlineFormSet):
    """An inline formset over only the newest ``limit`` messages, shown in ``seq`` order.

    The query reads ``limit`` rows through the ``(session, seq)`` index, however long the
    session is.
    """

    limit = INLINE_MESSAGES

    def get_queryset(self) -> list[Message]:  # type: ignore[override]
        """The newest ``limit`` messages of the session, oldest first."""
        if not hasattr(self, "_queryset"):
            queryset = self.queryset
            assert queryset is not None  # set by BaseModelFormSet.__init__
            newest = queryset.order_by("-seq")[: self.limit]
            self._queryset = list(reversed(newest))
        return self._queryset

    def save(self, commit: bool = True) -> list[Message]:
        """Save nothing, whatever was posted: messages are immutable (docs/design.md §7.4)."""
        self.new_objects: list[Message] = []
        self.changed_objects: list[Any] = []
        self.deleted_objects: list[Message] = []
        return []


class MessageInline(_MessageTabularInline):
    """Read-only view of a session's newest messages, in ``seq`` order (docs/design.md §7.4)."""

    model = Message
    formset = NewestMessagesFormSet
    fields = ("seq", "role", "source", "text_preview", "created_at")
    readonly_fields = fields
    extra = 0
    max_num = 0
    can_delete = False
    show_change_link = True

    def get_formset(self, request: HttpRequest, obj: Session | None = None, **kwargs: Any) -> Any:
        """The formset; the heading says when only the newest messages are shown."""
        if obj is not None and obj.message_count > self.formset.limit:
            self.verbose_name_plural = _("newest %(shown)d of %(total)d messages") % {
                "shown": self.formset.limit,
                "total": obj.message_count,
            }
        return super().get_formset(request, obj, **kwargs)

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """Messages are appended by the host through the services, never in the admin."""
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """Messages are immutable."""
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """Delete messages from the message admin, which keeps the counters right."""
        return False

    @admin.display(description=_("text"))
    def text_preview(self, obj: Message) -> str:
        """The message's text, cut to ``TEXT_PREVIEW_CHARS`` characters."""
        return preview(obj.text, TEXT_PREVIEW_CHARS)


# -- sessions -------------------------------------------------------------------------------------


@admin.register(Session)
class SessionAdmin(CheckedInputAdminMixin):
    """Sessions: browse, search, filter, edit host-owned fields, and repair (docs/design.md §7.4)."""

    form = SessionChangeForm
    add_form = SessionAddForm
    list_display = (
        "display_title",
        "scope_and_agent",
        "is_default",
        "message_count",
        "updated",
        "is_archived",
    )
    list_filter = ("is_default", ArchivedListFilter, BackfilledListFilter, "agent_id")
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
        (None, {"fields": ("id", "agent_id", "scope", "is_default")}),
        (_("Host-owned"), {"fields": ("title", "cwd", "metadata")}),
        (
            _("Kept by cortex_sessions"),
            {
                "fields": (
                    "message_count",
                    "last_message",
                    "last_seq",
                    "all_messages",
                    "backfilled_by",
                    "archived_at",
                    "fork_source",
                    "forked_at_seq",
                    "created_at",
                    "updated_at",
                )
            },
        ),
    )
    change_readonly_fields = (
        "id",
        "agent_id",
        "scope",
        "is_default",
        "message_count",
        "last_message",
        "last_seq",
        "all_messages",
        "backfilled_by",
        "archived_at",
        "fork_source",
        "forked_at_seq",
        "created_at",
        "updated_at",
    )

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
            changes = {
                name: form.cleaned_data[name]
                for name in form.changed_data
                if name in _EDITABLE_FIELDS
            }
            if not changes:
                return
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
        """Delete the session with its messages through ``services.delete_session``."""
        with contextlib.suppress(SessionNotFound):  # already gone
            services.delete_session(scope=obj.scope, session_id=obj.pk)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Session]) -> None:
        """Delete each selected session with its messages through ``services.delete_session``."""
        for session_id, scope in queryset.order_by().values_list("pk", "scope"):
            with contextlib.suppress(SessionNotFound):  # deleted meanwhile
                services.delete_session(scope=scope, session_id=session_id)

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
        total = 0
        for session in sessions:
            if not self.has_delete_permission(request, session):
                perms_needed.add(opts.verbose_name)
            url = reverse(
                f"{self.admin_site.name}:{opts.app_label}_{opts.model_name}_change",
                args=[quote(session.pk)],
            )
            deleted.append(
                format_html('{}: <a href="{}">{}</a>', capfirst(opts.verbose_name), url, session)
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
        return deleted, model_count, perms_needed, []

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Session], search_term: str
    ) -> tuple[QuerySet[Session], bool]:
        """Search title and agent id; a search term that is a UUID also finds that session."""
        results, may_have_duplicates = super().get_search_results(request, queryset, search_term)
        session_id = _parse_uuid(search_term) if search_term.strip() else None
        if session_id is not None:
            results = results | queryset.filter(pk=session_id)
        return results, may_have_duplicates

    # -- columns and read-only fields -------------------------------------------------------------

    @admin.display(description=_("title and last message"), ordering="title")
    def display_title(self, obj: Session) -> str:
        """The title over the start of ``last_message``, each one line (``admin.css``).

        An untitled session shows a placeholder so it still has a link; a session the
        default-session backfill created is marked *backfilled* (docs/design.md §4). Both lines
        carry their whole text as a tooltip; the stylesheet cuts them with an ellipsis so long
        titles never make tall rows.
        """
        title = obj.title or str(_("(untitled)"))
        marker = (
            format_html('<span class="cortex-badge">{}</span> ', _("backfilled"))
            if obj.backfilled_by
            else ""
        )
        return format_html(
            '<span class="cortex-line" title="{}">{}{}</span>'
            '<span class="cortex-line cortex-preview" title="{}">{}</span>',
            obj.title,
            marker,
            title,
            obj.last_message,
            preview(obj.last_message, LIST_PREVIEW_CHARS) or "\u00a0",
        )

    @admin.display(description=_("scope and agent"), ordering="scope")
    def scope_and_agent(self, obj: Session) -> str:
        """The scope over the agent id, each one line with its whole text as a tooltip."""
        return format_html(
            '<span class="cortex-line" title="{}">{}</span>'
            '<span class="cortex-line cortex-preview" title="{}">{}</span>',
            obj.scope,
            obj.scope,
            obj.agent_id,
            obj.agent_id,
        )

    @admin.display(description=_("updated"), ordering="updated_at")
    def updated(self, obj: Session) -> str:
        """``updated_at`` in the current time zone as ``YYYY-MM-DD HH:MM``, compact for the list."""
        return formats.date_format(timezone.localtime(obj.updated_at), "Y-m-d H:i")

    @admin.display(description=_("archived"), boolean=True, ordering="archived_at")
    def is_archived(self, obj: Session) -> bool:
        """Whether the session is archived (docs/design.md §11.2)."""
        return obj.archived_at is not None

    @admin.display(description=_("forked from"))
    def fork_source(self, obj: Session) -> str:
        """The session this one was forked from, linked while it exists (docs/design.md §11.1);
        its bare id once it was deleted; empty for a session that is no fork."""
        if obj.forked_from is None:
            return self.get_empty_value_display()
        source = Session.objects.filter(pk=obj.forked_from).only("id", "title").first()
        if source is None:
            return format_html("{} {}", obj.forked_from, _("(deleted)"))
        url = reverse(
            f"{self.admin_site.name}:cortex_sessions_session_change", args=[quote(source.pk)]
        )
        return format_html('<a href="{}">{}</a>', url, source)

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

    # -- actions ----------------------------------------------------------------------------------

    @admin.action(description=_("Make the selected session the default"), permissions=["change"])
    def make_default(self, request: HttpRequest, queryset: QuerySet[Session]) -> None:
        """Make one session its agent's default at its scope (``services.make_default``)."""
        selected = list(queryset.order_by()[:2])
        if len(selected) != 1:
            self.message_user(
                request, _("Select exactly one session to make it the default."), messages.WARNING
            )
            return
        session = selected[0]
        try:
            session = services.make_default(scope=session.scope, session_id=session.pk)
        except CortexSessionsError as exc:
            self.message_user(request, exc.message, messages.ERROR)
            return
        self.message_user(
            request,
            _("“%(session)s” is now the default session of %(agent)s at %(scope)s.")
            % {"session": session, "agent": session.agent_id, "scope": session.scope},
            messages.SUCCESS,
        )

    def _archive_action(
        self, request: HttpRequest, queryset: QuerySet[Any], *, archive: bool
    ) -> None:
        service = services.archive_session if archive else services.unarchive_session
        changed = 0
        for session_id, scope, archived_at in queryset.order_by().values_list(
            "pk", "scope", "archived_at"
        ):
            if (archived_at is None) != archive:
                continue
            with contextlib.suppress(SessionNotFound):  # deleted meanwhile
                service(scope=scope, session_id=session_id)
                changed += 1
        message = (
            ngettext("Archived %(count)d session.", "Archived %(count)d sessions.", changed)
            if archive
            else ngettext(
                "Unarchived %(count)d session.", "Unarchived %(count)d sessions.", changed
            )
        )
        self.message_user(request, message % {"count": changed}, messages.SUCCESS)

    @admin.action(description=_("Archive the selected sessions"), permissions=["change"])
    def archive_sessions(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        """Archive each selected session (``services.archive_session``, docs/design.md §11.2);
        an archived default is demoted."""
        self._archive_action(request, queryset, archive=True)

    @admin.action(description=_("Unarchive the selected sessions"), permissions=["change"])
    def unarchive_sessions(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        """Make each selected session live again (``services.unarchive_session``)."""
        self._archive_action(request, queryset, archive=False)

    @admin.action(
        description=_("Recount messages of the selected sessions"), permissions=["change"]
    )
    def recount_messages(self, request: HttpRequest, queryset: QuerySet[Session]) -> None:
        """Check counters against the rows and repair drift (``services.recount_sessions``)."""
        by_scope: dict[str, list[uuid.UUID]] = defaultdict(list)
        for session_id, scope in queryset.order_by().values_list("pk", "scope"):
            by_scope[scope].append(session_id)
        checked = sum(len(ids) for ids in by_scope.values())
        drifts: list[services.CounterDrift] = []
        for scope, ids in by_scope.items():
            drifts.extend(services.recount_sessions(scope=scope, session_ids=ids))
        if not drifts:
            self.message_user(
                request,
                ngettext(
                    "Checked %(checked)d session: its counters were right.",
                    "Checked %(checked)d sessions: all counters were right.",
                    checked,
                )
                % {"checked": checked},
                messages.SUCCESS,
            )
            return
        details = "; ".join(
            f"{drift.session_id}: {drift.stored_count} → {drift.actual_count} messages"
            + (
                ", last message fixed"
                if drift.stored_last_message != drift.actual_last_message
                else ""
            )
            for drift in drifts[:RECOUNT_REPORT_LIMIT]
        )
        if len(drifts) > RECOUNT_REPORT_LIMIT:
            details += f"; and {len(drifts) - RECOUNT_REPORT_LIMIT} more"
        self.message_user(
            request,
            ngettext(
                "Checked %(checked)d session(s): %(wrong)d had wrong counters and was repaired "
                "(%(details)s).",
                "Checked %(checked)d session(s): %(wrong)d had wrong counters and were repaired "
                "(%(details)s).",
                len(drifts),
            )
            % {"checked": checked, "wrong": len(drifts), "details": details},
            messages.WARNING,
        )


# -- messages -------------------------------------------------------------------------------------


@admin.register(Message)
class MessageAdmin(CheckedInputAdminMixin):
    """Messages: a read-only list filtered by session, role and source (docs/design.md §7.4).

    Nothing is added or changed here. Deleting goes through ``services.delete_message`` so the
    session's counters follow; legacy messages without a session (docs/design.md §4) cannot be deleted.
    """

    list_display = ("id", "session_link", "seq", "role", "source", "text_preview", "created")
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
        "created_at",
    )
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest) -> bool:
        """Messages are appended by the host through the services, never in the admin."""
        return False

    def has_change_permission(self, request: HttpRequest, obj: Message | None = None) -> bool:
        """Messages are immutable."""
        return False

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
        try:
            return super().delete_view(request, object_id, extra_context)
        except SessionArchived as exc:
            return self._refuse_archived(request, exc, obj)

    def _refuse_archived(
        self, request: HttpRequest, exc: SessionArchived, obj: Message | None
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

    def get_actions(self, request: HttpRequest) -> dict[str, Any]:
        """The site's actions, with "Delete selected" refusing archived sessions' messages."""
        actions: dict[str, Any] = dict(super().get_actions(request))
        site_action = actions.get("delete_selected")
        if site_action is not None:
            _func, name, description = site_action
            actions["delete_selected"] = (type(self)._delete_selected_live, name, description)
        return actions

    def _delete_selected_live(
        self, request: HttpRequest, queryset: QuerySet[Message]
    ) -> HttpResponse | None:
        """Django's "Delete selected", all or nothing: when any selected message belongs to an
        archived session, nothing is deleted and the changelist shows an error naming how many
        (on the confirmation step and on the confirmed post alike)."""
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
        try:
            # The history entries are written before the deletes: one transaction for both.
            with transaction.atomic(using=router.db_for_write(Message)):
                return delete_selected(self, request, queryset)
        except SessionArchived as exc:  # archived after the check: everything rolled back
            self.message_user(request, f"{exc.message} Nothing was deleted.", messages.ERROR)
            return None

    @admin.display(description=_("session"), ordering="session_id")
    def session_link(self, obj: Message) -> str:
        """The session, linked to its admin page; empty for legacy rows."""
        if obj.session is None:
            return self.get_empty_value_display()
        url = reverse(
            f"{self.admin_site.name}:cortex_sessions_session_change", args=[quote(obj.session.pk)]
        )
        return format_html('<a href="{}">{}</a>', url, obj.session)

    @admin.display(description=_("text"))
    def text_preview(self, obj: Message) -> str:
        """The message's text, cut to ``TEXT_PREVIEW_CHARS`` characters."""
        return preview(obj.text, TEXT_PREVIEW_CHARS)

    @admin.display(description=_("created"), ordering="created_at")
    def created(self, obj: Message) -> str:
        """``created_at`` in the current time zone as ``YYYY-MM-DD HH:MM``, compact for the list."""
        return formats.date_format(timezone.localtime(obj.created_at), "Y-m-d H:i")

    @admin.display(description=_("text"))
    def message_text(self, obj: Message) -> str:
        """The message's whole text (its text blocks joined by newlines, docs/design.md §3.2)."""
        return obj.text

    @admin.display(description=_("content"))
    def pretty_content(self, obj: Message) -> str:
        """The content blocks as indented JSON, long strings wrapped, never clipped (``admin.css``)."""
        return format_html(
            '<pre class="cortex-json">{}</pre>',
            json.dumps(obj.content, indent=2, ensure_ascii=False),
        )

    @admin.display(description=_("metadata"))
    def pretty_metadata(self, obj: Message) -> str:
        """The host's metadata as indented JSON, like the content."""
        return format_html(
            '<pre class="cortex-json">{}</pre>',
            json.dumps(obj.metadata, indent=2, ensure_ascii=False),
        )


@admin.register(ImportedConversation)
class ImportedConversationAdmin(CheckedInputAdminMixin):
    """Read-only list of the external ids sessions were imported under (``transfer``).

    Rows are written by ``cortex_sessions_import`` in the transaction that creates the session
    and go away with it; the admin only shows them, searchable by external id, agent or scope.
    """

    list_display = ("external_id", "agent_id", "scope", "session_link", "imported_at")
    list_filter = ("agent_id",)
    search_fields = ("external_id", "agent_id", "scope")
    list_select_related = ("session",)
    ordering = ("-imported_at", "-id")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description=_("session"), ordering="session_id")
    def session_link(self, obj: ImportedConversation) -> str:
        """The imported session, linked to its admin page."""
        url = reverse(
            f"{self.admin_site.name}:cortex_sessions_session_change", args=[quote(obj.session_id)]
        )
        return format_html('<a href="{}">{}</a>', url, obj.session)
