"""The admin reads from the primary database (docs/design.md §17.2).

An operator who saves a form and lands on the changelist must see what they saved: with
:class:`cortex_sessions.routers.ReplicaRouter` every admin view of the app, its template
rendered included, runs inside :func:`cortex_sessions.consistency.primary_reads`.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.urls import URLPattern

from cortex_sessions.consistency import primary_reads

if TYPE_CHECKING:
    _ModelAdmin = admin.ModelAdmin[Any]
else:  # not subscriptable at run time
    _ModelAdmin = admin.ModelAdmin

__all__ = ["PrimaryReadsAdminMixin"]


def _on_primary(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    @wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        with primary_reads():
            response = view(request, *args, **kwargs)
            render = getattr(response, "render", None)
            if callable(render) and not getattr(response, "is_rendered", True):
                render()  # a TemplateResponse reads its rows while it renders
        return response

    return wrapped


class PrimaryReadsAdminMixin(_ModelAdmin):
    """A model admin whose every view reads from the primary database."""

    def get_urls(self) -> list[URLPattern]:
        """Django's admin URLs, each view wrapped in ``primary_reads``."""
        urls = super().get_urls()
        for pattern in urls:
            if isinstance(pattern, URLPattern):
                pattern.callback = _on_primary(pattern.callback)
        return urls
