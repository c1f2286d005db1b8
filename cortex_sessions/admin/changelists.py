"""What every changelist of the app shares: checked input and bounded counts (docs/design.md §12.5).

:class:`CheckedInputAdminMixin` is the base of every model admin of the app and its integrations;
it filters only through the declared filters (:class:`DeclaredFiltersChangeList`), refuses NUL
characters and selections that are not primary keys, and counts with
:class:`BoundedCountPaginator`.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.views.main import ERROR_FLAG, ChangeList
from django.core.exceptions import ValidationError
from django.core.paginator import Paginator
from django.db import connections
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.utils.functional import cached_property
from django.utils.translation import gettext_lazy as _

from .primary import PrimaryReadsAdminMixin

if TYPE_CHECKING:
    _Paginator = Paginator[Any]
    _ModelAdmin = admin.ModelAdmin[Any]
else:  # these Django classes are not subscriptable at run time
    _Paginator = Paginator
    _ModelAdmin = admin.ModelAdmin

__all__ = [
    "COUNT_LIMIT",
    "BoundedCountPaginator",
    "CheckedInputAdminMixin",
    "DeclaredFiltersChangeList",
]

#: Most rows a changelist counts exactly; past it the count is an estimate (docs/design.md §12.5).
COUNT_LIMIT = 10_000


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


class CheckedInputAdminMixin(PrimaryReadsAdminMixin):
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
    - Every view reads from the primary database (:class:`~.primary.PrimaryReadsAdminMixin`).
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
