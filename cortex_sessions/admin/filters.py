"""List filters of the session and message changelists (docs/design.md §7.4, §12.5)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin.options import IncorrectLookupParameters
from django.db.models import Q, QuerySet
from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _

from ..models import Message, Session, not_expired_q
from .base import parse_uuid

__all__ = [
    "ArchivedListFilter",
    "BackfilledListFilter",
    "ExpiredListFilter",
    "MessageSessionListFilter",
    "YesNoListFilter",
]


class YesNoListFilter(admin.SimpleListFilter):
    """A filter offering ``yes`` and ``no``: ``yes`` keeps the rows matching :attr:`condition`,
    ``no`` the others, and no value keeps every row. Subclasses set ``title``,
    ``parameter_name`` and ``condition``."""

    #: The rows ``yes`` keeps (``no`` keeps the rest).
    condition: Q

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        """``yes`` and ``no``."""
        return [("yes", _("Yes")), ("no", _("No"))]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        """Keep the rows matching :attr:`condition` (``yes``) or the others (``no``)."""
        if self.value() == "yes":
            return queryset.filter(self.condition)
        if self.value() == "no":
            return queryset.exclude(self.condition)
        return queryset


class BackfilledListFilter(YesNoListFilter):
    """Sessions created by the default-session backfill (``backfilled_by`` set, docs/design.md §4)."""

    title = _("backfilled")
    parameter_name = "backfilled"
    condition = ~Q(backfilled_by="")


class ArchivedListFilter(YesNoListFilter):
    """Archived sessions (``archived_at`` set) or live ones (docs/design.md §11.2)."""

    title = _("archived")
    parameter_name = "archived"
    condition = Q(archived_at__isnull=False)


class ExpiredListFilter(YesNoListFilter):
    """Sessions whose ``expires_at`` has passed (hidden from every read, waiting for the
    expiry sweep), or the others (docs/design.md §18.1)."""

    title = _("expired")
    parameter_name = "expired"

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        """Compared with the time of the request."""
        self.condition = ~not_expired_q()
        return super().queryset(request, queryset)


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
        session_id = parse_uuid(value)
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
        session_id = parse_uuid(value)
        if session_id is None:
            raise IncorrectLookupParameters(f"{value!r} is not a session id.")
        return queryset.filter(session_id=session_id)
