"""``ReplicaRouter``: reads on PostgreSQL streaming replicas, never stale for the caller's own
writes (docs/design.md §17.2, docs/scaling.md).

Opt in with ``DATABASE_ROUTERS = ["cortex_sessions.routers.ReplicaRouter"]`` and name the
replicas' aliases in ``CORTEX_SESSIONS["READ_REPLICAS"]``. It routes this app's models only
(other models are left to the next router, or to ``default``):

- writes, and every read inside a transaction on the primary, go to the primary (``default``);
- a read outside a transaction goes to a replica that has replayed everything the caller wrote
  (:mod:`cortex_sessions.consistency`: ``pg_last_wal_replay_lsn()`` at or past the caller's
  position) and lags at most ``REPLICA_MAX_LAG`` seconds; else to the primary;
- a replica that cannot be reached is skipped for :data:`RETRY_DOWN_SECONDS`; the API runs a
  read that a replica failed (down mid-request, a query cancelled by a recovery conflict) again
  on the primary, so neither is ever a 5xx;
- inside :class:`cortex_sessions.consistency.primary_reads` (the admin, the management
  commands) every read goes to the primary.

Replicas never get migrations. What a replica knows of its progress is cached for
:data:`STATUS_TTL_SECONDS` per process, and asked again at once when a caller needs more than
the cached position.
"""

from __future__ import annotations

import contextlib
import random
import time
from dataclasses import dataclass
from typing import Any

from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections

from . import consistency
from .conf import app_settings

__all__ = [
    "RETRY_DOWN_SECONDS",
    "STATUS_TTL_SECONDS",
    "ReplicaRouter",
    "ReplicaStatus",
    "forget_statuses",
    "mark_down",
    "replica_status",
]

#: Seconds a replica that could not be reached is left out before it is tried again.
RETRY_DOWN_SECONDS = 5.0
#: Seconds a replica's replay position and lag, once read, are trusted for (per process).
STATUS_TTL_SECONDS = 1.0

_APP_LABEL = "cortex_sessions"


@dataclass(frozen=True)
class ReplicaStatus:
    """What a replica said of itself.

    Attributes:
        checked_at: ``time.monotonic()`` of the question.
        replay_lsn: the WAL position it has replayed (an integer); ``None`` when it is no
            standby (a primary, or a test mirror of one): it has everything.
        lag: seconds it is behind (0 when it has replayed all it received).
        down: it could not be reached; ``checked_at`` says when.
        positions: whether it can compare positions at all (PostgreSQL).
    """

    checked_at: float
    replay_lsn: int | None = None
    lag: float = 0.0
    down: bool = False
    positions: bool = True

    def serves(self, position: consistency.Position, max_lag: float) -> bool:
        """Whether it may answer a read of a caller at ``position``."""
        if self.down or position.unknown or position.pending:
            return False
        if self.lag > max_lag:
            return False
        if position.lsn is None or self.replay_lsn is None:
            return self.positions or position.lsn is None
        return self.replay_lsn >= position.lsn


#: The last status of each replica alias, shared by the threads of a process.
_statuses: dict[str, ReplicaStatus] = {}

_STATUS_SQL = (
    "SELECT pg_is_in_recovery(), pg_last_wal_replay_lsn()::text, "
    "CASE WHEN pg_last_wal_receive_lsn() IS NOT DISTINCT FROM pg_last_wal_replay_lsn() THEN 0 "
    "ELSE COALESCE(EXTRACT(EPOCH FROM now() - pg_last_xact_replay_timestamp()), 0) END"
)


def _ask(alias: str) -> ReplicaStatus:
    now = time.monotonic()
    connection = connections[alias]
    if connection.vendor != "postgresql":
        return ReplicaStatus(checked_at=now, positions=False)
    try:
        with connection.cursor() as cursor:
            cursor.execute(_STATUS_SQL)
            in_recovery, replay, lag = cursor.fetchone()
    except DatabaseError:
        with contextlib.suppress(DatabaseError):
            connection.close()
        return ReplicaStatus(checked_at=now, down=True)
    if not in_recovery or replay is None:
        return ReplicaStatus(checked_at=now)
    return ReplicaStatus(
        checked_at=now, replay_lsn=consistency.parse_lsn(replay), lag=float(lag or 0)
    )


def replica_status(alias: str, position: consistency.Position) -> ReplicaStatus:
    """The status of replica ``alias``, read again when the cached one is older than
    :data:`STATUS_TTL_SECONDS` or behind ``position`` (a down replica is left alone for
    :data:`RETRY_DOWN_SECONDS`)."""
    now = time.monotonic()
    status = _statuses.get(alias)
    if status is not None:
        age = now - status.checked_at
        if status.down:
            if age < RETRY_DOWN_SECONDS:
                return status
        elif age < STATUS_TTL_SECONDS and (
            position.lsn is None or status.replay_lsn is None or status.replay_lsn >= position.lsn
        ):
            return status
    status = _statuses[alias] = _ask(alias)
    return status


def mark_down(alias: str) -> None:
    """Leave replica ``alias`` out for :data:`RETRY_DOWN_SECONDS` (a query on it failed)."""
    _statuses[alias] = ReplicaStatus(checked_at=time.monotonic(), down=True)
    with contextlib.suppress(DatabaseError):
        connections[alias].close()


def forget_statuses() -> None:
    """Forget every replica's cached status (tests; a replica replaced)."""
    _statuses.clear()


def _ours(model: Any) -> bool:
    return bool(model is not None and model._meta.app_label == _APP_LABEL)


class ReplicaRouter:
    """A database router for PostgreSQL streaming replicas with read-your-writes
    (docs/design.md §17.2; the module's docstring says how it routes)."""

    primary = DEFAULT_DB_ALIAS

    def db_for_read(self, model: Any, **hints: Any) -> str | None:
        """The alias a read of ``model`` goes to: a fresh-enough replica, else the primary;
        ``None`` (no opinion) for another app's model."""
        if not _ours(model):
            return None
        replicas = app_settings.READ_REPLICAS
        if not replicas or consistency.reads_pinned_to_primary():
            return self.primary
        connection = connections[self.primary]
        if connection.in_atomic_block or not connection.get_autocommit():
            return self.primary  # the caller's transaction: its own writes are there
        position = consistency.write_position(self.primary)
        if position.unknown or position.pending:
            return self.primary
        max_lag = float(app_settings.REPLICA_MAX_LAG)
        for alias in random.sample(list(replicas), len(replicas)):
            if replica_status(alias, position).serves(position, max_lag):
                consistency.note_replica_used(alias)
                return str(alias)
        return self.primary

    def db_for_write(self, model: Any, **hints: Any) -> str | None:
        """The primary, remembered as written by the caller (``None`` for another app)."""
        if not _ours(model):
            return None
        consistency.remember_write(self.primary)
        return self.primary

    def allow_relation(self, obj1: Any, obj2: Any, **hints: Any) -> bool | None:
        """Rows read from the primary and from its replicas are the same data."""
        databases = {self.primary, *app_settings.READ_REPLICAS}
        if obj1._state.db in databases and obj2._state.db in databases:
            return True
        return None

    def allow_migrate(self, db: str, app_label: str, **hints: Any) -> bool | None:
        """Never on a replica (it is read-only and receives the primary's schema)."""
        if db in app_settings.READ_REPLICAS:
            return False
        return None
