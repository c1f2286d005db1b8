"""System checks validating ``settings.CORTEX_SESSIONS`` at start-up (docs/design.md §9).

IDs:
- ``cortex_sessions.E001``: ``CORTEX_SESSIONS`` is not a dict.
- ``cortex_sessions.W001``: ``CORTEX_SESSIONS`` has a key this app does not know.
- ``cortex_sessions.E002``: ``SCOPE_RESOLVER`` cannot be imported or is not callable.
- ``cortex_sessions.E003``: ``MAX_SCOPE_DEPTH`` is not an integer from 1 to 8.
- ``cortex_sessions.E004``: a size or count setting is not a positive integer.
- ``cortex_sessions.E005``: ``PAGE_SIZE`` is larger than ``MAX_PAGE_SIZE``.
- ``cortex_sessions.E006``: ``MAX_REFERENCES`` is not an integer from 1 to 3; the session
  reference feature would raise ``SESSION_REFERENCE_INVALID_CONFIG`` (docs/design.md §8.9).
- ``cortex_sessions.E010``: ``PREPARED_STATEMENTS`` is not ``True`` or ``False``.
- ``cortex_sessions.E012``: ``IDEMPOTENCY_TTL`` is not a positive integer (seconds).
- ``cortex_sessions.E013``: ``SEARCH_CONFIG`` is not a text search configuration name.
- ``cortex_sessions.E017``: ``SEARCH_TIMEOUT`` is not a positive, finite number of seconds.
- ``cortex_sessions.E020``: ``READ_REPLICAS`` is not a list of aliases in ``DATABASES`` other
  than ``default`` (docs/design.md §17.2).
- ``cortex_sessions.E021``: ``REPLICA_MAX_LAG`` is not a positive, finite number of seconds.
- ``cortex_sessions.E022``: ``TOKEN_COUNTER`` cannot be imported, is not callable, or does not
  return an int from 0 to 2**31 - 1 for a sample message (docs/design.md §16.2).
- ``cortex_sessions.E018``: ``MAX_MESSAGES_PER_APPEND`` is not an integer of at least 2.
- ``cortex_sessions.E019``: ``MAX_JSON_KEYS`` is not an integer of at least 100.
- ``cortex_sessions.E023``: ``RETENTION`` is not a list, or a policy is not a dict, has a
  missing or unknown key, an unknown action, an ``after`` that is not a positive integer or a
  bad ``agent_id`` (docs/design.md §18.1).
- ``cortex_sessions.E024``: a ``RETENTION`` policy's scope does not parse.
- ``cortex_sessions.E014`` (database check): PostgreSQL has no text search configuration
  ``SEARCH_CONFIG`` (``pg_ts_config``), so message search cannot parse a query.
- ``cortex_sessions.W002`` (database check): the message search column was built with another
  configuration than ``SEARCH_CONFIG`` (``manage.py cortex_sessions_search_rebuild`` rebuilds it).
- ``cortex_sessions.W015`` (database check: ``migrate``, ``check --database``): on MySQL/MariaDB
  the session titles, or the database default they would get, use a collation of the
  ``general`` family (``*_general_ci``, ``*_general_nopad_ci``), under which the title
  ``search`` takes every character outside the BMP for any other and ``ß`` for ``s``
  (docs/design.md §15.6).
- ``cortex_sessions.W016`` (database check, same): that collation is not a utf8mb4 one
  (``latin1``, ``utf8mb3``), so a title or search holding an emoji fails in the database.

Database checks run where Django runs them: ``manage.py migrate`` and ``manage.py check
--database default``.
"""

from __future__ import annotations

import math
from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, Warning, register
from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections

from . import search
from .conf import (
    DEFAULTS,
    HARD_MAX_REFERENCES,
    HARD_MAX_SCOPE_DEPTH,
    MIN_JSON_KEYS,
    MIN_MESSAGES_PER_APPEND,
    app_settings,
)
from .retention import PolicyError, parse_policies, parse_policy
from .tokens import MAX_TOKEN_COUNT

__all__ = ["check_database_collation", "check_search_config", "check_settings"]

_POSITIVE_INTS = (
    "LAST_MESSAGE_PREVIEW_CHARS",
    "MAX_MESSAGE_BYTES",
    "CANDIDATE_LIMIT",
    "MAX_REFERENCE_BYTES",
    "PAGE_SIZE",
    "MAX_PAGE_SIZE",
    "SEARCH_CANDIDATES",
)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _int_setting(
    name: str,
    *,
    minimum: int = 1,
    maximum: int | None = None,
    consequence: str = "",
    hint: str,
    id: str,
) -> list[CheckMessage]:
    """The check of one integer setting: ``[]`` when ``CORTEX_SESSIONS[name]`` is an integer
    (not a bool) from ``minimum`` to ``maximum`` (no upper bound when ``None``), else one
    ``Error`` with ``id`` and ``hint`` whose message names the value, then ``consequence``."""
    value = getattr(app_settings, name)
    if _is_int(value) and value >= minimum and (maximum is None or value <= maximum):
        return []
    return [Error(f"CORTEX_SESSIONS[{name!r}] is {value!r}{consequence}.", hint=hint, id=id)]


@register(Tags.compatibility)
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Validate every ``CORTEX_SESSIONS`` key; returns the problems found (empty when valid)."""
    user = app_settings.user_settings
    if not isinstance(user, dict):
        return [
            Error(
                "CORTEX_SESSIONS must be a dict.",
                hint="Set CORTEX_SESSIONS = {...} with the keys documented in README.md.",
                id="cortex_sessions.E001",
            )
        ]
    errors: list[CheckMessage] = [
        Warning(
            f"CORTEX_SESSIONS has an unknown key {key!r}.",
            hint=f"Known keys: {', '.join(sorted(DEFAULTS))}.",
            id="cortex_sessions.W001",
        )
        for key in sorted(set(user) - set(DEFAULTS))
    ]

    try:
        resolver = app_settings.SCOPE_RESOLVER
    except ImportError as exc:
        resolver, problem = None, f"cannot be imported ({exc})"
    else:
        problem = "" if callable(resolver) else "is not callable"
    if resolver is None or problem:
        errors.append(
            Error(
                f"CORTEX_SESSIONS['SCOPE_RESOLVER'] {problem}.",
                hint="Give a dotted path to a callable (request) -> Scope | None.",
                id="cortex_sessions.E002",
            )
        )

    errors += _int_setting(
        "MAX_SCOPE_DEPTH",
        maximum=HARD_MAX_SCOPE_DEPTH,
        hint=f"Use an integer from 1 to {HARD_MAX_SCOPE_DEPTH}.",
        id="cortex_sessions.E003",
    )
    for name in _POSITIVE_INTS:
        errors += _int_setting(name, hint="Use a positive integer.", id="cortex_sessions.E004")

    page, max_page = app_settings.PAGE_SIZE, app_settings.MAX_PAGE_SIZE
    if _is_int(page) and _is_int(max_page) and page > max_page:
        errors.append(
            Error(
                f"CORTEX_SESSIONS['PAGE_SIZE'] ({page}) is larger than MAX_PAGE_SIZE ({max_page}).",
                hint="Lower PAGE_SIZE or raise MAX_PAGE_SIZE.",
                id="cortex_sessions.E005",
            )
        )

    errors += _int_setting(
        "MAX_REFERENCES",
        maximum=HARD_MAX_REFERENCES,
        consequence="; session references would fail with SESSION_REFERENCE_INVALID_CONFIG",
        hint=f"Use an integer from 1 to {HARD_MAX_REFERENCES}.",
        id="cortex_sessions.E006",
    )

    prepared = app_settings.PREPARED_STATEMENTS
    if not isinstance(prepared, bool):
        errors.append(
            Error(
                f"CORTEX_SESSIONS['PREPARED_STATEMENTS'] is {prepared!r}.",
                hint="Use True or False (docs/performance.md: prepared statements and PgBouncer).",
                id="cortex_sessions.E010",
            )
        )

    errors += _int_setting(
        "IDEMPOTENCY_TTL",
        consequence="; Idempotency-Key replays and cortex_sessions_prune need a lifetime in "
        "seconds",
        hint="Use a positive integer number of seconds, e.g. 86400 (24 hours).",
        id="cortex_sessions.E012",
    )

    config = app_settings.SEARCH_CONFIG
    if not isinstance(config, str) or not search.CONFIG_PATTERN.fullmatch(config):
        errors.append(
            Error(
                f"CORTEX_SESSIONS['SEARCH_CONFIG'] is {config!r}; message search needs the name "
                "of a PostgreSQL text search configuration.",
                hint="Use e.g. 'simple' (the default) or 'english' (letters, digits, '_', "
                "optionally 'schema.name').",
                id="cortex_sessions.E013",
            )
        )

    errors.extend(
        _seconds_setting(
            "SEARCH_TIMEOUT",
            needed_by="message search needs the seconds a search statement may run before it "
            "is cancelled",
            examples="10 (the default) or 2.5",
            id="cortex_sessions.E017",
        )
    )
    errors.extend(_check_request_bounds())
    errors.extend(_check_replicas())
    errors.extend(_check_retention())
    errors.extend(_check_token_counter())
    return errors


def _check_retention() -> list[CheckMessage]:
    """``E023`` and ``E024``: every problem of the ``RETENTION`` policies, one error per bad
    policy (docs/design.md §18.1)."""
    value = app_settings.RETENTION
    if not isinstance(value, list | tuple):
        try:
            parse_policies(value)
        except PolicyError as exc:
            return [_policy_error(exc)]
    errors: list[CheckMessage] = []
    for index, policy in enumerate(value):
        try:
            parse_policy(policy, index)
        except PolicyError as exc:
            errors.append(_policy_error(exc))
    return errors


def _policy_error(exc: PolicyError) -> CheckMessage:
    if exc.scope_error:
        return Error(
            f"CORTEX_SESSIONS['RETENTION']: {exc}",
            hint="Give a canonical scope such as 'org=acme' (never empty: a policy for "
            "everything is not expressible).",
            id="cortex_sessions.E024",
        )
    return Error(
        f"CORTEX_SESSIONS['RETENTION']: {exc}",
        hint='Use a list of {"scope": "org=acme", "after": 2592000, "action": "delete" or '
        '"archive"} dicts, with an optional "agent_id".',
        id="cortex_sessions.E023",
    )


#: The message :func:`_check_token_counter` counts: a counter must answer it with an int.
_SAMPLE_MESSAGE = ("user", [{"type": "text", "text": "How many tokens is this?"}])


def _check_token_counter() -> list[CheckMessage]:
    """``E022``: ``TOKEN_COUNTER`` names a callable that counts a sample message as an int
    from 0 to 2**31 - 1 (docs/design.md §16.2); a counter that raises is reported too."""
    try:
        counter = app_settings.TOKEN_COUNTER
    except ImportError as exc:
        problem = f"cannot be imported ({exc})"
    else:
        problem = "" if callable(counter) else "is not callable"
    if not problem:
        try:
            count = counter(*_SAMPLE_MESSAGE)
        except Exception as exc:  # any error of the host's counter is reported
            problem = f"raised {type(exc).__name__} ({exc}) counting a sample message"
        else:
            if type(count) is not int or not 0 <= count <= MAX_TOKEN_COUNT:
                problem = f"returned {count!r} for a sample message, not an int"
    if not problem:
        return []
    return [
        Error(
            f"CORTEX_SESSIONS['TOKEN_COUNTER'] {problem}.",
            hint="Give a dotted path to a callable (role, content) -> int, content being a "
            "list of content blocks; the default is 'cortex_sessions.tokens.estimate_tokens'.",
            id="cortex_sessions.E022",
        )
    ]


def _check_request_bounds() -> list[CheckMessage]:
    """``cortex_sessions.E018`` and ``E019``: the bounds of one request's work
    (docs/design.md §12.6)."""
    return _int_setting(
        "MAX_MESSAGES_PER_APPEND",
        minimum=MIN_MESSAGES_PER_APPEND,
        hint=f"Use an integer of at least {MIN_MESSAGES_PER_APPEND} (a message with "
        "its session-reference context is one append of two), e.g. 1000 (the default).",
        id="cortex_sessions.E018",
    ) + _int_setting(
        "MAX_JSON_KEYS",
        minimum=MIN_JSON_KEYS,
        hint=f"Use an integer of at least {MIN_JSON_KEYS}, e.g. 1000 (the default).",
        id="cortex_sessions.E019",
    )


def _check_replicas() -> list[CheckMessage]:
    """``E020`` and ``E021``: the settings of :class:`~cortex_sessions.routers.ReplicaRouter`
    (docs/design.md §17.2)."""
    errors: list[CheckMessage] = []
    replicas = app_settings.READ_REPLICAS
    if not isinstance(replicas, list | tuple) or not all(isinstance(a, str) for a in replicas):
        errors.append(
            Error(
                f"CORTEX_SESSIONS['READ_REPLICAS'] is {replicas!r}; it must list database aliases.",
                hint="Use a list of aliases from DATABASES, e.g. ['replica'] (or [] for none).",
                id="cortex_sessions.E020",
            )
        )
    else:
        unknown = [a for a in replicas if a not in settings.DATABASES or a == DEFAULT_DB_ALIAS]
        if unknown:
            errors.append(
                Error(
                    f"CORTEX_SESSIONS['READ_REPLICAS'] names {unknown!r}, which is not a "
                    "replica alias in DATABASES.",
                    hint="Name aliases of DATABASES other than 'default' (the primary).",
                    id="cortex_sessions.E020",
                )
            )
    errors.extend(
        _seconds_setting(
            "REPLICA_MAX_LAG",
            needed_by="ReplicaRouter needs the seconds a replica may lag and still serve reads",
            examples="10 (the default) or 0.5",
            id="cortex_sessions.E021",
        )
    )
    return errors


def _seconds_setting(name: str, *, needed_by: str, examples: str, id: str) -> list[CheckMessage]:
    """The error ``id`` when setting ``name`` is not a positive, finite number of seconds
    (``needed_by`` says what needs it; ``examples`` are good values); else nothing."""
    value = getattr(app_settings, name)
    if _is_number(value) and 0 < value < math.inf:
        return []
    return [
        Error(
            f"CORTEX_SESSIONS[{name!r}] is {value!r}; {needed_by}.",
            hint=f"Use a positive number of seconds, e.g. {examples}.",
            id=id,
        )
    ]


_COLLATION_HINT = (
    "Create the database with CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci (or "
    "uca1400_ai_ci on MariaDB 10.10+) before migrating; see README.md, Databases."
)


@register(Tags.database)
def check_search_config(
    app_configs: Any = None, databases: Any = None, **kwargs: Any
) -> list[CheckMessage]:
    """On each PostgreSQL database checked: ``SEARCH_CONFIG`` exists (``E014``) and is the
    configuration the search column was built with (``W002``; docs/design.md §11.5).

    Returns:
        The problems found; nothing for other databases, a malformed setting (``E013``
        reports it) or a database that cannot be read.
    """
    config = app_settings.SEARCH_CONFIG
    if not isinstance(config, str) or not search.CONFIG_PATTERN.fullmatch(config):
        return []
    messages: list[CheckMessage] = []
    for alias in databases or ():
        connection = connections[alias]
        if connection.vendor != "postgresql":
            continue
        try:
            exists = search.config_exists(connection, config)
            installed = search.installed_config(connection)
        except DatabaseError:  # pragma: no cover - a database Django cannot read is its own error
            continue
        if not exists:
            messages.append(
                Error(
                    f"CORTEX_SESSIONS['SEARCH_CONFIG'] is {config!r}, which database "
                    f"{alias!r} does not have.",
                    hint="Name a configuration listed by SELECT cfgname FROM pg_ts_config, "
                    "or create it.",
                    id="cortex_sessions.E014",
                )
            )
        elif installed is not None and installed != config:
            messages.append(
                Warning(
                    f"The message search column of database {alias!r} was built with text "
                    f"search configuration {installed!r}, but SEARCH_CONFIG is {config!r}: "
                    "queries would not find what the column holds.",
                    hint="Run manage.py cortex_sessions_search_rebuild (docs/search.md), or "
                    f"set SEARCH_CONFIG back to {installed!r}.",
                    id="cortex_sessions.W002",
                )
            )
    return messages


@register(Tags.database)
def check_database_collation(
    app_configs: Any = None, databases: Any = None, **kwargs: Any
) -> list[CheckMessage]:
    """Warn when a MySQL/MariaDB database gives session titles a collation of the ``general``
    family (``cortex_sessions.W015``: ``*_general_ci``, ``*_general_nopad_ci``, …) or of
    another character set than utf8mb4 (``cortex_sessions.W016``) (docs/design.md §15.6).

    Reads the collation of ``cortex_sessions_session.title`` when the table exists, else the
    database's default (what ``migrate`` will give it). Runs for the aliases in ``databases``
    only (``migrate`` passes its database; ``manage.py check --database``). Returns the
    warnings (empty elsewhere, and when the database cannot be reached).
    """
    from .models import Session

    warnings: list[CheckMessage] = []
    for alias in databases or ():
        connection = connections[alias]
        if connection.vendor != "mysql":
            continue
        try:
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT COALESCE((SELECT collation_name FROM information_schema.columns "
                    "WHERE table_schema = DATABASE() AND table_name = %s "
                    "AND column_name = 'title'), @@collation_database)",
                    [Session._meta.db_table],
                )
                (collation,) = cursor.fetchone()
        except DatabaseError:
            continue
        collation = str(collation)
        if not collation.startswith("utf8mb4_"):
            warnings.append(
                Warning(
                    f"Database {alias!r} gives session titles the collation {collation}, "
                    "not a utf8mb4 one: a title or search holding a character outside its "
                    "character set (an emoji) fails with a database error.",
                    hint=_COLLATION_HINT,
                    id="cortex_sessions.W016",
                )
            )
        if "_general_" in collation or collation.endswith("_general_ci"):
            warnings.append(
                Warning(
                    f"Database {alias!r} gives session titles the collation {collation}: the "
                    "title search there takes every emoji for any other and 'ß' for 's'.",
                    hint=_COLLATION_HINT,
                    id="cortex_sessions.W015",
                )
            )
    return warnings
