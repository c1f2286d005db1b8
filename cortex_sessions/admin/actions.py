"""The session admin's actions: make default, recount, archive and unarchive (docs/design.md §7.4, §11.2).

Each action calls the services and reports with ``message_user``; each needs the *change session*
permission.
"""

from __future__ import annotations

import contextlib
import uuid
from collections import defaultdict
from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from .. import services
from ..exceptions import CortexSessionsError, SessionNotFound
from ..models import Session

if TYPE_CHECKING:
    _ModelAdmin = admin.ModelAdmin[Any]
else:  # not subscriptable at run time
    _ModelAdmin = admin.ModelAdmin

__all__ = ["RECOUNT_REPORT_LIMIT", "SessionActionsMixin"]

#: Most repaired sessions named one by one in the "Recount messages" report.
RECOUNT_REPORT_LIMIT = 10


class SessionActionsMixin(_ModelAdmin):
    """The actions of :class:`~cortex_sessions.admin.sessions.SessionAdmin`; every write goes
    through :mod:`cortex_sessions.services`."""

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
