"""Database routers of the test suite (docs/design.md §17.1).

:class:`StrictReplicaRouter` is what ``pytest --strict-replica-router`` (or
``CORTEX_STRICT_ROUTER=1``) installs over the whole suite: reads go to the alias ``strict_replica`` (a
test mirror of ``default``), and a read the app makes through the router while a
transaction is open, or a read of sessions or messages without the ``scope`` hint, raises
:class:`RoutingViolation` at the line that made it (a test's own reads are not checked). :class:`RecordingRouter` notes every routed read, for tests that look at where
the reads of one service call went.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.db import connections

import cortex_sessions
from cortex_sessions.models import IdempotencyKey, ImportedConversation, Message, Session

_APP = str(Path(cortex_sessions.__file__).parent) + "/"
_ADMIN = _APP + "admin/"
_NEUTRAL = {_APP + "models.py", _APP + "counters.py", _APP + "metadata.py"}
_ADK_ADMIN = "/integrations/adk/admin.py"
_TESTS = str(Path(__file__).parent) + "/"
_HERE = str(Path(__file__))

#: Models whose routed reads must say which scope they read (``scope=`` or an ``instance=``
#: that has one, as Django passes for related lookups).
SCOPED_MODELS = (Session, Message, ImportedConversation, IdempotencyKey)


#: The alias the strict router reads from: a test mirror of ``default`` (tests/settings.py); not
#: ``replica``, the real standby's alias in tests/replicas/.
STRICT_ALIAS = "strict_replica"


class RoutingViolation(AssertionError):
    """A read went through ``db_for_read`` where docs/design.md §17.1 forbids it."""


def open_transaction(connection: Any) -> bool:
    """Whether ``connection`` holds a transaction the code under test opened: an ``atomic()``
    block other than the ones a Django test case wraps every test in (Django marks those
    ``_from_testcase``, as ``transaction.atomic(durable=True)`` tells them apart), or autocommit
    turned off by hand."""
    if any(not getattr(block, "_from_testcase", False) for block in connection.atomic_blocks):
        return True
    return (
        not connection.in_atomic_block
        and connection.connection is not None
        and not connection.get_autocommit()
    )


def has_scope(hints: dict[str, Any]) -> bool:
    """Whether a read's hints name its scope: ``scope=`` given, or an ``instance`` with one."""
    if "scope" in hints:
        return True
    instance = hints.get("instance")
    return instance is not None and bool(getattr(instance, "scope", None))


def made_by_the_app() -> bool:
    """Whether the read being routed was made by cortex_sessions' code (the innermost frame on
    the stack that is the app's or the tests' own is the app's): a test's own reads (factories,
    assertions) are not what §17.1 governs, nor are the admin's (an operator's unscoped
    pages, in Django's own transactions; the replica router sends them to the primary, §17.2).
    A service the admin calls is checked as from anywhere else."""
    frame = inspect.currentframe()
    while frame is not None:
        filename = frame.f_code.co_filename
        if filename in _NEUTRAL:  # queryset methods and helpers run for whoever called them
            frame = frame.f_back
            continue
        if filename.startswith(_APP):
            return not filename.startswith(_ADMIN) and not filename.endswith(_ADK_ADMIN)
        if filename.startswith(_TESTS) and filename != _HERE:
            return False
        frame = frame.f_back
    return False


class StrictReplicaRouter:
    """Reads to ``strict_replica``, writes to ``default``; raises on a read routed away from an open
    transaction or without its scope (docs/design.md §17.1)."""

    def db_for_read(self, model: type, **hints: Any) -> str:
        if not made_by_the_app():
            return STRICT_ALIAS
        for connection in connections.all(initialized_only=True):
            if open_transaction(connection):
                raise RoutingViolation(
                    f"A read of {model.__name__} went through db_for_read while a transaction "
                    f"is open on {connection.alias!r}: it must run in that transaction "
                    "(docs/design.md §17.1)."
                )
        if issubclass(model, SCOPED_MODELS) and not has_scope(hints):
            raise RoutingViolation(
                f"A read of {model.__name__} went through db_for_read without the scope hint "
                f"(hints: {sorted(hints)}; docs/design.md §17.1)."
            )
        return STRICT_ALIAS

    def db_for_write(self, model: type, **hints: Any) -> str:
        return "default"

    def allow_relation(self, obj1: Any, obj2: Any, **hints: Any) -> bool:
        return True

    def allow_migrate(self, db: str, app_label: str, **hints: Any) -> bool:
        return db == "default"


@dataclass
class RoutedRead:
    """One read that went through :class:`RecordingRouter`."""

    model: type
    hints: dict[str, Any]
    in_transaction: bool


@dataclass
class RecordingRouter:
    """Notes every routed read (``reads``) and sends it to ``alias``; writes go to
    ``default``. Installed with ``override_settings(DATABASE_ROUTERS=[router])``."""

    alias: str = "default"
    reads: list[RoutedRead] = field(default_factory=list)

    def db_for_read(self, model: type, **hints: Any) -> str:
        busy = any(open_transaction(c) for c in connections.all(initialized_only=True))
        self.reads.append(RoutedRead(model, dict(hints), busy))
        return self.alias

    def db_for_write(self, model: type, **hints: Any) -> str:
        return "default"

    def allow_relation(self, obj1: Any, obj2: Any, **hints: Any) -> bool:
        return True

    def allow_migrate(self, db: str, app_label: str, **hints: Any) -> bool:
        return db == "default"
