"""ADK state in cortex rows: deltas split by prefix, and the shared ``app:``/``user:`` state
(docs/design.md §13.3).

Keys without a prefix live on the :class:`~.models.AdkSession` row; ``app:`` keys in
:class:`~.models.AdkAppState` (per tenant) and ``user:`` keys in :class:`~.models.AdkUserState`
(per mapped scope), stored without the prefix and merged back with it; ``temp:`` keys are never
stored.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, cast

from django.db.models import CharField, Value
from django.db.models.functions import Cast
from google.adk.sessions import _session_util
from google.adk.sessions.state import State

from cortex_sessions.content import check_json_object

from .models import AdkAppState, AdkUserState, user_state_key


def _state_deltas(state: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``state`` split into ``app``/``user``/``session`` deltas, JSON-safe as ADK's database
    store makes them (``_session_util.extract_json_safe_state_delta``: datetimes, pydantic
    models, bytes … serialized faithfully; what cannot be, by its string form).

    Each delta is checked by the rule of every stored JSON object (``check_json_object``,
    docs/design.md §12.4) before anything is written.

    Raises:
        NulCharacter, InvalidText: a key or string holds NUL or a lone surrogate, which
            PostgreSQL cannot store in JSON (refused on every database alike).
        InvalidInput: a value is nested deeper than the JSON rule allows, or is NaN or an
            infinity, which no database stores as JSON (``field="state"``).
    """
    extract = getattr(_session_util, "extract_json_safe_state_delta", None)
    if extract is None:  # pragma: no cover - ADK before the JSON-safe helper
        from pydantic_core import to_jsonable_python

        deltas = cast(
            dict[str, dict[str, Any]],
            to_jsonable_python(_session_util.extract_state_delta(state), serialize_unknown=True),
        )
    else:
        deltas = extract(state)
    for part in deltas.values():  # each is stored (merged) as one JSON object
        check_json_object(part, field="state")
    return deltas


def _user_state_q(scope: str, app_name: str, user_id: str) -> dict[str, Any]:
    """The lookup of the user state row at ``scope``: its key (the unique index), and the names
    it stands for."""
    return {
        "key": user_state_key(scope, app_name, user_id),
        "scope": scope,
        "app_name": app_name,
        "user_id": user_id,
    }


def _shared_state(
    tenant: str, scope: str, app_name: str, user_id: str, using: str
) -> dict[str, Any]:
    """The app's (in ``tenant``) and the user's (at ``scope``) shared state, prefixed, in one
    query."""
    app_state, user_states = _shared_states(tenant, app_name, [(scope, user_id)], using)
    return _prefixed(app_state, user_states.get((scope, user_id), {}))


def _shared_states(
    tenant: str, app_name: str, users: Collection[tuple[str, str]], using: str
) -> tuple[dict[str, Any], dict[tuple[str, str], dict[str, Any]]]:
    """The app's shared state (in ``tenant``) and the shared state of each ``(scope, user_id)``
    in ``users``, in one query whatever their number (``list_sessions``, docs/design.md §13.3).

    Returns:
        ``(app_state, {(scope, user_id): user_state})``, keys without their prefix; a user
        without stored state is absent from the mapping.
    """
    blank = Value("", output_field=CharField())
    app = (
        AdkAppState.objects.using(using)
        .filter(tenant=tenant, app_name=app_name)
        .annotate(kind=Value(State.APP_PREFIX), row_scope=blank, row_user=blank)
        .values_list("kind", "row_scope", "row_user", "state")
    )
    keys = {user_state_key(scope, app_name, user_id): (scope, user_id) for scope, user_id in users}
    user = (
        AdkUserState.objects.using(using)
        .filter(key__in=list(keys), app_name=app_name)
        # Cast: in a UNION, MySQL/MariaDB return the binary-collated scope column as bytes.
        .annotate(
            kind=Value(State.USER_PREFIX),
            row_scope=Cast("scope", output_field=CharField()),
            row_user=Cast("user_id", output_field=CharField()),
        )
        .values_list("kind", "row_scope", "row_user", "state")
    )
    wanted = set(keys.values())
    app_state: dict[str, Any] = {}
    user_states: dict[tuple[str, str], dict[str, Any]] = {}
    for kind, scope, user_id, state in app.union(user, all=True):
        if kind == State.APP_PREFIX:
            app_state = state or {}
        elif (scope, user_id) in wanted:  # the key is a hash: the names are checked too
            user_states[(scope, user_id)] = state or {}
    return app_state, user_states


def _prefixed(app_state: dict[str, Any], user_state: dict[str, Any]) -> dict[str, Any]:
    """App and user state merged, each key with its ADK prefix (``app:``, ``user:``)."""
    merged = {State.APP_PREFIX + key: value for key, value in app_state.items()}
    merged.update((State.USER_PREFIX + key, value) for key, value in user_state.items())
    return merged


def _create_shared_state_rows(
    tenant: str, scope: str, app_name: str, user_id: str, deltas: dict[str, dict[str, Any]]
) -> None:
    """Create the ``app``/``user`` state rows the deltas will lock, each in its own transaction.

    Created before the append's transaction, not inside it: on MySQL/MariaDB a concurrent insert
    of the same key leaves InnoDB's shared lock of the duplicate-key check on the row until the
    transaction ends, and two such holders then deadlock when both ask for its row lock
    (docs/design.md §15). Outside it the shared lock ends with the insert.
    """
    if deltas["app"]:
        AdkAppState.objects.get_or_create(tenant=tenant, app_name=app_name)
    if deltas["user"]:
        AdkUserState.objects.get_or_create(**_user_state_q(scope, app_name, user_id))


def _update_shared_state(
    tenant: str, scope: str, app_name: str, user_id: str, deltas: dict[str, dict[str, Any]]
) -> None:
    """Merge ``app``/``user`` deltas into their rows under row locks (same transaction)."""
    if deltas["app"]:
        app_row, _ = AdkAppState.objects.select_for_update().get_or_create(
            tenant=tenant, app_name=app_name
        )
        app_row.state = {**app_row.state, **deltas["app"]}
        app_row.save(update_fields=["state"])
    if deltas["user"]:
        user_row, _ = AdkUserState.objects.select_for_update().get_or_create(
            **_user_state_q(scope, app_name, user_id)
        )
        user_row.state = {**user_row.state, **deltas["user"]}
        user_row.save(update_fields=["state"])
