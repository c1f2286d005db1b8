"""A session's newest messages, read-only, on its admin page (docs/design.md §7.4)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.forms.models import BaseInlineFormSet
from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _

from ..content import preview
from ..models import Message, Session
from .base import TEXT_PREVIEW_CHARS, compaction_label

if TYPE_CHECKING:
    _MessageInlineFormSet = BaseInlineFormSet[Message, Session, Any]
    _MessageTabularInline = admin.TabularInline[Message, Session]
else:  # these Django classes are not subscriptable at run time
    _MessageInlineFormSet = BaseInlineFormSet
    _MessageTabularInline = admin.TabularInline

__all__ = ["INLINE_MESSAGES", "MessageInline", "NewestMessagesFormSet"]

#: How many of a session's newest messages its admin page shows inline.
INLINE_MESSAGES = 50


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
    fields = ("seq", "role", "source", "text_preview", "created_at", "compaction")
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

    @admin.display(description=_("compaction"))
    def compaction(self, obj: Message) -> str:
        """Which seqs a compaction summary stands for (docs/design.md §16.3); else empty."""
        return compaction_label(obj)
