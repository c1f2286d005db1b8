"""Settings of the app, from ``settings.CORTEX_SESSIONS`` (docs/design.md §9).

Use ``from cortex_sessions.conf import app_settings`` and read attributes. Only the
``CORTEX_SESSIONS`` dict itself is remembered, and forgotten whenever Django's
``setting_changed`` signal names it (``override_settings``, pytest-django's ``settings``
fixture), as DRF does with ``REST_FRAMEWORK``: a change takes effect at once, and the
services, which read several settings on every call, skip Django's settings proxy. Values are
validated by the system checks in :mod:`cortex_sessions.checks`, not here.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Callable
from typing import Any, Final, cast

from django.conf import settings
from django.core.signals import setting_changed
from django.utils.module_loading import import_string

__all__ = [
    "DEFAULTS",
    "HARD_MAX_REFERENCES",
    "HARD_MAX_SCOPE_DEPTH",
    "MIN_JSON_KEYS",
    "MIN_MESSAGES_PER_APPEND",
    "AppSettings",
    "app_settings",
]

#: Upper bound of ``MAX_SCOPE_DEPTH`` (docs/design.md §2.1).
HARD_MAX_SCOPE_DEPTH = 8
#: Upper bound of ``MAX_REFERENCES`` (docs/design.md §8.3).
HARD_MAX_REFERENCES = 3

DEFAULTS: dict[str, Any] = {
    "SCOPE_RESOLVER": "cortex_sessions.scope.user_scope_resolver",
    "MAX_SCOPE_DEPTH": 3,
    "LAST_MESSAGE_PREVIEW_CHARS": 280,
    "MAX_MESSAGE_BYTES": 1_048_576,
    "MAX_REFERENCES": 3,
    "CANDIDATE_LIMIT": 50,
    "MAX_REFERENCE_BYTES": 65_536,
    "PAGE_SIZE": 50,
    "MAX_PAGE_SIZE": 1000,
    "PREPARED_STATEMENTS": False,
    "IDEMPOTENCY_TTL": 86_400,
    "SEARCH_CONFIG": "simple",
    "SEARCH_CANDIDATES": 1000,
    "SEARCH_TIMEOUT": 10,
    "READ_REPLICAS": [],
    "REPLICA_MAX_LAG": 10,
    "MAX_MESSAGES_PER_APPEND": 1000,
    "MAX_JSON_KEYS": 1000,
    "TOKEN_COUNTER": "cortex_sessions.tokens.estimate_tokens",
    "RETENTION": [],
}

#: Least ``MAX_MESSAGES_PER_APPEND``: a message with its session-reference context is one
#: append of two messages (docs/design.md §8.8, §12.6).
MIN_MESSAGES_PER_APPEND = 2
#: Least ``MAX_JSON_KEYS`` (docs/design.md §12.6).
MIN_JSON_KEYS = 100


class _Unread(enum.Enum):
    """The type of :data:`_UNREAD` (one member, shown as ``<unread>``)."""

    UNREAD = "UNREAD"

    def __repr__(self) -> str:
        return "<unread>"


#: Read ``settings.CORTEX_SESSIONS`` again (a value that is never the setting).
_UNREAD: Final = _Unread.UNREAD


class AppSettings:
    """Typed, live view of ``settings.CORTEX_SESSIONS`` with the defaults of docs/design.md §9."""

    def __init__(self) -> None:
        self._user: Any = _UNREAD

    def reload(self) -> None:
        """Forget the ``CORTEX_SESSIONS`` value read last (``setting_changed`` calls this)."""
        self._user = _UNREAD

    def _get(self, name: str) -> Any:
        user = self._user
        if user is _UNREAD:
            user = self._user = getattr(settings, "CORTEX_SESSIONS", {})
        if isinstance(user, dict) and name in user:
            return user[name]
        return DEFAULTS[name]

    @property
    def user_settings(self) -> Any:
        """The raw ``CORTEX_SESSIONS`` value (for the system checks)."""
        return getattr(settings, "CORTEX_SESSIONS", {})

    @property
    def SCOPE_RESOLVER(self) -> Callable[..., Any]:
        """The callable ``(request) -> Scope | None`` named by the dotted path (docs/design.md §2.5)."""
        value = self._get("SCOPE_RESOLVER")
        resolver = import_string(value) if isinstance(value, str) else value
        return cast(Callable[..., Any], resolver)

    @property
    def MAX_SCOPE_DEPTH(self) -> int:
        """Most levels a scope may have; default 3, at most 8 (docs/design.md §2.1)."""
        return cast(int, self._get("MAX_SCOPE_DEPTH"))  # validated by the system checks

    @property
    def LAST_MESSAGE_PREVIEW_CHARS(self) -> int:
        """Characters kept in ``Session.last_message`` before ``…`` (docs/design.md §5)."""
        return cast(int, self._get("LAST_MESSAGE_PREVIEW_CHARS"))  # validated by the system checks

    @property
    def MAX_MESSAGE_BYTES(self) -> int:
        """Largest message, in UTF-8 bytes of the JSON of its content plus metadata."""
        return cast(int, self._get("MAX_MESSAGE_BYTES"))  # validated by the system checks

    @property
    def MAX_REFERENCES(self) -> int:
        """Most distinct session references one message may carry; at most 3 (docs/design.md §8.3)."""
        return cast(int, self._get("MAX_REFERENCES"))  # validated by the system checks

    @property
    def CANDIDATE_LIMIT(self) -> int:
        """Most reference candidates returned (docs/design.md §8.4)."""
        return cast(int, self._get("CANDIDATE_LIMIT"))  # validated by the system checks

    @property
    def MAX_REFERENCE_BYTES(self) -> int:
        """UTF-8 byte budget of one serialized reference snapshot (docs/design.md §8.6)."""
        return cast(int, self._get("MAX_REFERENCE_BYTES"))  # validated by the system checks

    @property
    def PAGE_SIZE(self) -> int:
        """Default page size of the API's list endpoints (docs/design.md §7.3)."""
        return cast(int, self._get("PAGE_SIZE"))  # validated by the system checks

    @property
    def MAX_PAGE_SIZE(self) -> int:
        """Largest page a client may ask for (docs/design.md §7.3)."""
        return cast(int, self._get("MAX_PAGE_SIZE"))  # validated by the system checks

    @property
    def PREPARED_STATEMENTS(self) -> bool:
        """On PostgreSQL with psycopg 3, send the hot-path statements (append, newest messages,
        get, resolve) with server-side binding, prepared once per connection. Off by default:
        prepared statements need each client to keep its server session, which PgBouncer in
        transaction or statement pooling mode does not give before 1.21 (docs/design.md §14).
        """
        return cast(bool, self._get("PREPARED_STATEMENTS"))  # validated by the system checks

    @property
    def IDEMPOTENCY_TTL(self) -> int:
        """Seconds an ``Idempotency-Key`` is remembered (default 24 h; docs/design.md §12.1)."""
        return cast(int, self._get("IDEMPOTENCY_TTL"))  # validated by the system checks

    @property
    def SEARCH_CONFIG(self) -> str:
        """The PostgreSQL text search configuration of message search (default ``simple``:
        words as written, lower-cased, no stemming, no stop words; docs/design.md §11.5). Read
        when the search column is built (migration ``0012``, ``cortex_sessions_search_rebuild``)
        and by every query, which must use the column's configuration (check ``W002``)."""
        return cast(str, self._get("SEARCH_CONFIG"))  # validated by the system checks

    @property
    def SEARCH_CANDIDATES(self) -> int:
        """How many matching messages (the newest) and as many matching titles a session
        search considers (default 1,000): past that, older matches are not listed and the count
        stops growing, so a word found in every other message costs what a rare one costs
        (docs/design.md §11.5, docs/search.md)."""
        return cast(int, self._get("SEARCH_CANDIDATES"))  # validated by the system checks

    @property
    def SEARCH_TIMEOUT(self) -> float:
        """Seconds one message search statement may run before the database cancels it
        (default 10; a positive number, fractions allowed): past it the search fails with
        ``SearchTimeout``, the API's 503 ``search_timeout`` (docs/design.md §11.5,
        docs/search.md)."""
        return cast(float, self._get("SEARCH_TIMEOUT"))  # validated by the system checks

    @property
    def MAX_MESSAGES_PER_APPEND(self) -> int:
        """Most messages one append may carry (default 1,000, at least 2): an API request, a
        service call; larger imports and SDK ``add_items`` calls are split into appends of at
        most this many (docs/design.md §12.6)."""
        return cast(int, self._get("MAX_MESSAGES_PER_APPEND"))  # validated by the system checks

    @property
    def MAX_JSON_KEYS(self) -> int:
        """Most keys one JSON object the app stores may have, at any depth (default 1,000, at
        least 100; docs/design.md §12.6)."""
        return cast(int, self._get("MAX_JSON_KEYS"))  # validated by the system checks

    @property
    def READ_REPLICAS(self) -> list[str]:
        """Aliases in ``DATABASES`` of the PostgreSQL streaming replicas
        :class:`~cortex_sessions.routers.ReplicaRouter` may read from (default none; docs/design.md
        §17.2, docs/scaling.md)."""
        return cast(list[str], self._get("READ_REPLICAS"))  # validated by the system checks

    @property
    def REPLICA_MAX_LAG(self) -> float:
        """Seconds a replica may be behind its primary and still serve reads (default 10; a
        positive number; docs/design.md §17.2)."""
        return cast(float, self._get("REPLICA_MAX_LAG"))  # validated by the system checks

    @property
    def RETENTION(self) -> list[dict[str, Any]]:
        """Retention policies ``{"scope", "agent_id"?, "after", "action"}`` that
        ``manage.py cortex_sessions_expire`` applies (default none; docs/design.md §18.1,
        :mod:`cortex_sessions.retention`)."""
        return cast(list[dict[str, Any]], self._get("RETENTION"))  # validated by the checks

    @property
    def TOKEN_COUNTER(self) -> Callable[[str, Any], int]:
        """The callable ``(role, content) -> int`` named by the dotted path (default
        ``cortex_sessions.tokens.estimate_tokens``): a message's ``token_count``
        (docs/design.md §16.2; checked by ``cortex_sessions.E022``)."""
        value = self._get("TOKEN_COUNTER")
        counter = _imported(value) if isinstance(value, str) else value
        return cast(Callable[[str, Any], int], counter)


@functools.cache
def _imported(path: str) -> Any:
    """``import_string(path)``, once per path: the token counter is read on every append."""
    return import_string(path)


app_settings = AppSettings()


def _reload(*, setting: str, **kwargs: Any) -> None:
    if setting == "CORTEX_SESSIONS":
        app_settings.reload()


setting_changed.connect(_reload)
