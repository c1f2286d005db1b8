"""The session list filters as one value: :class:`SessionFilters` (docs/design.md §7.2).

Every service that lists or counts sessions — ``session_queryset``, ``list_sessions``,
``count_sessions``, ``list_sessions_page`` and their async twins — takes the same
``filters: SessionFilters | None`` instead of restating each filter as a keyword, so a filter is
declared, validated and documented once, here. What is not a filter stays a keyword of the
service: the caller's ``scope`` (required on every read, docs/design.md §2.4), ``ordering`` and
the page bounds (``limit``/``offset``/``cursor``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..exceptions import InvalidFilter
from ..metadata import check_metadata_filter
from ..search import check_query
from ._common import _check_agent_id_filter, _check_filter_text

__all__ = ["SessionFilters", "session_filters"]


@dataclass(frozen=True)
class SessionFilters:
    """Which sessions a list or count shows, beyond the caller's scope (docs/design.md §7.2,
    §11.2, §11.3, §11.5).

    Every field is checked when the value is built (``dataclasses.replace`` checks again), so a
    ``SessionFilters`` that exists is valid and every service reads the same rules. The default,
    ``SessionFilters()``, lists every live (not archived) session of the scope. Values are
    compared by their fields; one holding ``metadata`` is not hashable (the object is a dict).

    Raises:
        InvalidAgentId: ``agent_id`` is not a string of 1 to 255 characters, not blank and
            without control characters (docs/design.md §12.4).
        InvalidFilter: ``exact`` or ``default_only`` is not a boolean; ``search`` is not a
            string; ``archived`` is not a boolean or ``None``; ``metadata`` is not an object
            of at most 10 keys (or nests too deep); ``q`` is not a string of 1 to 1,000
            characters holding something besides spaces, tabs and line breaks.
        NulCharacter, InvalidText: ``agent_id``, ``search``, ``q`` or a string of
            ``metadata`` holds a NUL character or a lone surrogate.
    """

    agent_id: str | None = None
    """Only this agent's sessions; ``None``: every agent's. An agent id no session can have
    is refused rather than matching nothing."""

    exact: bool = False
    """Only sessions stored at the scope itself, not beneath it (docs/design.md §2.3)."""

    default_only: bool = False
    """Only default sessions (docs/design.md §6)."""

    search: str | None = None
    """Case-insensitive substring of the title, ``%`` and ``_`` matched literally; ``None``
    (or ``""``, stored as ``None``): no title filter."""

    archived: bool | None = False
    """``False`` (the default) hides archived sessions, ``True`` shows only them, ``None``
    shows both (docs/design.md §11.2)."""

    metadata: Mapping[str, Any] | None = None
    """Only sessions whose metadata has every top-level key of this JSON object with an equal
    JSON value; at most 10 keys (docs/design.md §11.3). Stored as a checked copy (a dict)."""

    q: str | None = None
    """Message search (docs/design.md §11.5): only sessions whose conversation messages or
    title match; 1 to 1,000 characters. PostgreSQL: full-text, ``websearch_to_tsquery``
    syntax; SQLite: case-insensitive substring; MySQL/MariaDB: refused (``InvalidFilter``
    when the query is built). Rows then carry ``search_match``."""

    def __post_init__(self) -> None:
        """Check every field (errors as the class docstring lists) and store the checked
        ``metadata`` copy and a ``search`` of ``""`` as ``None``."""
        _check_agent_id_filter(self.agent_id)
        for name in ("exact", "default_only"):
            if not isinstance(getattr(self, name), bool):
                raise InvalidFilter(
                    f"{name} must be True or False; got {getattr(self, name)!r}.", field=name
                )
        if _check_filter_text(self.search, field="search") == "":
            object.__setattr__(self, "search", None)
        if self.archived is not None and not isinstance(self.archived, bool):
            raise InvalidFilter(
                f"archived must be True, False or None; got {self.archived!r}.", field="archived"
            )
        if self.metadata is not None:
            object.__setattr__(self, "metadata", check_metadata_filter(self.metadata))
        if self.q is not None:
            check_query(self.q)


def session_filters(filters: SessionFilters | None) -> SessionFilters:
    """The filters a service applies: ``filters`` itself, or ``SessionFilters()`` for ``None``.

    Raises:
        TypeError: ``filters`` is neither (e.g. a dict of the keywords the services took
            before 1.0: build ``SessionFilters(**that_dict)`` instead).
    """
    if filters is None:
        return SessionFilters()
    if not isinstance(filters, SessionFilters):
        raise TypeError(f"filters must be a SessionFilters or None, not {type(filters).__name__}.")
    return filters
