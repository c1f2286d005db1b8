"""Validation and helpers every service module shares (docs/design.md §7.1)."""

from __future__ import annotations

import enum
import logging
import random
import re
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import datetime
from typing import Any, Final, Literal, TypeVar

from django.db import (
    DatabaseError,
    IntegrityError,
    OperationalError,
    connections,
    router,
    transaction,
)
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from .. import routing
from ..content import check_json_object, check_json_value
from ..exceptions import (
    DefaultConflict,
    InvalidAgentId,
    InvalidFilter,
    InvalidInput,
    LegalHold,
    SessionArchived,
    SessionNotFound,
    UsageTotalOverflow,
    ValueTooLong,
    WriteOutcomeUnknown,
)
from ..faults import commit_was_refused, is_answer_lost, is_deadlock, is_out_of_range
from ..models import Session
from ..scope import Scope
from ..usage import MAX_TOTAL_COST, SQLITE_MAX_TOTAL_COST, Totals, check_totals

#: Orderings a session list accepts, each optionally prefixed with ``-`` (docs/design.md §7.2).
ORDERING_FIELDS = (
    "created_at",
    "updated_at",
    "title",
    "message_count",
    # The usage totals (docs/design.md §16.1-§16.2).
    "input_tokens",
    "output_tokens",
    "cost",
    "context_tokens",
)
DEFAULT_ORDERING = "-updated_at"
TITLE_MAX_CHARS = 500
#: Largest integer a filter, page bound or ``seq`` may be (a signed 64-bit column).
MAX_INT64 = 2**63 - 1
AGENT_ID_MAX_CHARS = 255


class Unchanged(enum.Enum):
    """The type of :data:`UNCHANGED`: one member, so ``value is not UNCHANGED`` narrows a
    parameter typed ``str | Unchanged`` to ``str`` for a type checker."""

    UNCHANGED = "UNCHANGED"

    def __repr__(self) -> str:
        # What ``inspect.signature`` and help() show as the default: ``title=UNCHANGED``.
        return "UNCHANGED"


#: The default of an update's field that the caller leaves out: the field is not written
#: (``update_session``, docs/design.md §7.1). Never a value a field can take.
UNCHANGED: Final = Unchanged.UNCHANGED

logger = logging.getLogger("cortex_sessions")

#: ``transaction.savepoint_create`` (Django 6.1, which deprecates ``savepoint``), or
#: ``transaction.savepoint`` on Django 5.2 and 6.0: the same function under its two names.
_savepoint_create = getattr(transaction, "savepoint_create", None) or transaction.savepoint


# -- validation helpers ---------------------------------------------------------------------------


def _check_agent_id(agent_id: Any) -> str:
    if not isinstance(agent_id, str) or not agent_id.strip():
        raise InvalidAgentId("agent_id is required.", field="agent_id")
    # A NUL or a lone surrogate has the code it has in every other string (as in the API).
    check_json_value(agent_id, field="agent_id")
    if len(agent_id) > AGENT_ID_MAX_CHARS:
        raise InvalidAgentId(field="agent_id")
    if _CONTROL_CHARACTER.search(agent_id):
        raise InvalidAgentId(field="agent_id")
    return agent_id


#: A control character (C0 or DEL), which no agent id holds. A lone surrogate is refused before
#: (``invalid_text``, by ``check_json_value``); one expression instead of a test per character,
#: since a resolve and an agent-filtered get check the id on every call.
_CONTROL_CHARACTER = re.compile("[\x00-\x1f\x7f]")


def check_agent_id(agent_id: Any) -> str:
    """Validate an agent id as the services do (1–255 characters, no control characters).

    For callers that must refuse a bad agent id before doing any work (e.g. an import).

    Returns:
        ``agent_id`` unchanged.

    Raises:
        NulCharacter: it holds a NUL character (``nul_character``, as every string does).
        InvalidText: it holds a lone surrogate (``invalid_text``, as every string does).
        InvalidAgentId: it is not a non-blank string of at most 255 characters without
            control characters.
    """
    return _check_agent_id(agent_id)


def _check_agent_id_filter(agent_id: Any) -> str | None:
    """``None`` (no filter), or an agent id under the rule of :func:`check_agent_id`: a
    filter naming an agent no session can have is refused, never answered with nothing
    (docs/design.md §12.4), as the API refuses ``?agent_id=a%09b``."""
    return None if agent_id is None else _check_agent_id(agent_id)


def _check_title(title: Any) -> str:
    if not isinstance(title, str):
        raise InvalidInput("title must be a string.", field="title")
    check_json_value(title, field="title")
    if len(title) > TITLE_MAX_CHARS:
        raise ValueTooLong(
            f"title is {len(title)} characters; at most {TITLE_MAX_CHARS} are allowed.",
            field="title",
        )
    return title


def _check_cwd(cwd: Any) -> str | None:
    if cwd is None:
        return None
    if not isinstance(cwd, str):
        raise InvalidInput("cwd must be a string or null.", field="cwd")
    check_json_value(cwd, field="cwd")
    return cwd


def _check_int(value: Any, *, field: str, minimum: int) -> int:
    """An integer from ``minimum`` to the largest 64-bit value, or ``InvalidFilter``."""
    if not isinstance(value, int) or isinstance(value, bool) or not minimum <= value <= MAX_INT64:
        raise InvalidFilter(
            f"{field} must be an integer from {minimum} to {MAX_INT64}; got {value!r}.",
            field=field,
        )
    return value


def _check_filter_text(value: Any, *, field: str) -> str | None:
    """``None``, or a string that can be compared on any database (no NUL, no lone surrogate)."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidFilter(f"{field} must be a string; got {value!r}.", field=field)
    check_json_value(value, field=field)
    return value


def _check_metadata(metadata: Any) -> dict[str, Any]:
    """``None`` → ``{}``; a mapping → a validated dict copy; anything else → ``InvalidMetadata``
    (``dict()`` of a list of pairs would otherwise silently turn it into an object)."""
    if metadata is None:
        return {}
    return check_json_object(dict(metadata) if isinstance(metadata, Mapping) else metadata)


def _session_id(session_id: Any) -> uuid.UUID:
    """Parse a session id; anything that is not a UUID is simply not found (docs/design.md §7.3)."""
    if isinstance(session_id, uuid.UUID):
        return session_id
    try:
        return uuid.UUID(str(session_id))
    except (TypeError, ValueError, AttributeError):
        raise SessionNotFound() from None


def _db_for_write() -> str:
    return router.db_for_write(Session)


def _db_for_read(scope: Scope | str | None) -> str:
    """Where a read of sessions at ``scope`` runs: the write database inside a transaction on
    it, else the router's pick with the ``scope`` hint (:func:`cortex_sessions.routing.db_for_read`,
    docs/design.md §17.1)."""
    return routing.db_for_read(Session, scope=scope)


def _locked_session(scope: Scope | str, session_id: uuid.UUID | str) -> Session:
    """The in-scope session row, locked for update until the transaction ends."""
    try:
        return Session.objects.within(scope).select_for_update().get(pk=_session_id(session_id))
    except Session.DoesNotExist:
        raise SessionNotFound() from None


#: The unit of the random backoff before a write the database rolled back to break a deadlock
#: runs again (seconds, growing with each attempt).
DEADLOCK_BACKOFF_SECONDS = 0.005

_T = TypeVar("_T")


def _retry_default_race(using: str, attempt: Callable[[], _T], *, attempts: int) -> _T:
    """Run ``attempt`` — one write that may race other writers of a one-default pair — until
    it returns, at most ``attempts`` times (docs/design.md §12.3, §15.4).

    ``attempt`` runs again after an ``IntegrityError`` (it collided with a default a concurrent
    writer created; it must make its writes in its own ``transaction.atomic`` block so the
    collision rolled back only them), and after the database rolled its transaction back to
    break a deadlock (InnoDB's locks on the one-default index make these a normal event on
    MySQL/MariaDB), with a few milliseconds of random backoff so the winner of the cycle
    commits first. A deadlock is retried only when no caller's transaction encloses the call
    (:func:`_in_callers_transaction`: ``ATOMIC_REQUESTS``, a host's ``atomic``, manual
    transaction management): the rollback undid the caller's work too, so the error
    propagates to it.

    Args:
        using: the database alias ``attempt`` writes to.
        attempt: the write; returns its result.
        attempts: how many times to try.

    Returns:
        What ``attempt`` returned.

    Raises:
        DefaultConflict: every attempt collided (409, safe to retry).
        OperationalError: a deadlock inside a caller's transaction, deadlocks on every
            attempt, or any other database error (``attempt``'s other errors propagate too).
    """
    outermost = not _in_callers_transaction(using)
    for number in range(attempts):
        try:
            return attempt()
        except IntegrityError:
            if number == attempts - 1:
                raise DefaultConflict() from None
        except OperationalError as exc:
            if not outermost or not is_deadlock(exc) or number == attempts - 1:
                raise
            time.sleep(random.uniform(0, DEADLOCK_BACKOFF_SECONDS * (number + 1)))
    raise AssertionError("unreachable")  # pragma: no cover


def _check_live(session: Session) -> Session:
    """``session`` unchanged, or ``SessionArchived`` when it is archived (docs/design.md §11.2).

    Called by every write to a session's messages and by make-default, on the row they hold
    locked, so an archive that commits first is always seen.
    """
    if session.archived_at is not None:
        raise SessionArchived()
    return session


def _check_not_held(session: Session) -> Session:
    """``session`` unchanged, or ``LegalHold`` when it is on legal hold (docs/design.md §18.1).

    Called by every delete of a session or of its messages, on the row it holds locked, so a
    hold that commits first is always seen.
    """
    if session.legal_hold:
        raise LegalHold()
    return session


def _check_expires_at(value: Any) -> datetime | None:
    """An ``expires_at`` as stored: ``None`` (never expires), an aware ``datetime``, or an
    ISO 8601 string with its UTC offset (a merge patch, an import); docs/design.md §18.1.

    A time already past is accepted: the session is hidden from reads at once and the next
    sweep deletes it ("expire now").

    Raises:
        InvalidInput: anything else (a naive datetime, a string that is no ISO 8601
            date-time with offset, another type), naming ``expires_at``.
    """
    if value is None:
        return None
    parsed: Any = value
    if isinstance(value, str):
        try:
            parsed = parse_datetime(value)
        except ValueError:
            parsed = None
    if not isinstance(parsed, datetime) or timezone.is_naive(parsed):
        raise InvalidInput(
            "expires_at must be an ISO 8601 date-time with a UTC offset, or null.",
            field="expires_at",
        )
    return parsed


def _in_callers_transaction(using: str) -> bool:
    """Whether a transaction of the caller's encloses a call now on database ``using``: an
    ``atomic()`` block (``ATOMIC_REQUESTS``, a host's own) or manual transaction management
    (autocommit turned off by the host, ``transaction.set_autocommit(False)``). Either way the
    caller commits, and a rollback the database makes to break a deadlock (InnoDB rolls back
    the whole transaction) undoes the caller's work too. Call it before the service's own
    ``atomic()``."""
    connection = transaction.get_connection(using)
    return connection.in_atomic_block or not connection.get_autocommit()


@contextmanager
def _write_transaction(using: str) -> Iterator[None]:
    """``transaction.atomic(using=using)`` for a service's write, whose commit is told apart
    from the write (docs/design.md §12.3).

    A fault before the COMMIT is sent propagates as it is: the transaction is rolled back and
    nothing was written (the API answers 503 ``database_unavailable``). A fault while the
    outermost block commits — in the COMMIT, or in Django's ``set_autocommit(True)`` right
    after it — that is not the database refusing the commit
    (:func:`~cortex_sessions.faults.commit_was_refused`) leaves the outcome unknown: the write
    may be stored. It is raised as :class:`~cortex_sessions.exceptions.WriteOutcomeUnknown`,
    never as a fault that says nothing was written. Inside a caller's transaction
    (:func:`_in_callers_transaction`) the block is a savepoint and the commit is the caller's,
    so nothing is converted.

    Args:
        using: the database alias the write goes to.

    Raises:
        WriteOutcomeUnknown: the commit failed and may have been carried out (chained to the
            database error).
        Whatever the block raises, unchanged, and the database's refusal of the commit.
    """
    if _in_callers_transaction(using):
        with transaction.atomic(using=using):
            yield
        return
    connection = transaction.get_connection(using)
    committing = False
    try:
        with transaction.atomic(using=using):
            yield
            # Reached only when the block ended without an exception: the COMMIT is next,
            # unless an inner error marked the block for rollback.
            committing = not connection.needs_rollback
    except DatabaseError as exc:
        if committing and not commit_was_refused(exc):
            logger.warning("The commit of a write failed; its outcome is unknown: %s", exc)
            raise WriteOutcomeUnknown() from exc
        raise


class autocommit_write:  # lower case: used as the function it was, ``with autocommit_write(…)``
    """Around one write statement that commits itself (autocommit mode; the one-statement
    append of docs/design.md §14): a connection that fails without the server's answer
    (:func:`~cortex_sessions.faults.is_answer_lost`) may have committed it, so the fault is
    raised as :class:`~cortex_sessions.exceptions.WriteOutcomeUnknown`, as a fault in a
    COMMIT is by :func:`_write_transaction`. Inside a caller's transaction the statement
    commits nothing (a lost connection rolls that transaction back): nothing is converted.

    A class rather than a ``@contextmanager`` generator: it surrounds every append on
    PostgreSQL, and a generator-based context manager costs a few microseconds more a call.

    Args:
        using: the database alias the write goes to.

    Raises:
        WriteOutcomeUnknown: the answer was lost (chained to the database error).
        Whatever the block raises, otherwise unchanged.
    """

    __slots__ = ("_convert", "_using")

    def __init__(self, using: str) -> None:
        self._using = using
        self._convert = False

    def __enter__(self) -> None:
        self._convert = not _in_callers_transaction(self._using)

    def __exit__(self, kind: Any, exc: BaseException | None, traceback: Any) -> Literal[False]:
        if exc is None or not self._convert or not isinstance(exc, DatabaseError):
            return False  # nothing raised, or raised unchanged
        if not is_answer_lost(exc):
            return False
        logger.warning("A self-committing write lost its answer; its outcome is unknown: %s", exc)
        raise WriteOutcomeUnknown() from exc


#: The name the services modules import (:func:`autocommit_write`).
_autocommit_write = autocommit_write


def check_totals_fit(
    session: Session, added: Totals, using: str, *, field: str = "messages"
) -> None:
    """Refuse, before anything is written, a write that would take the totals of ``session``
    (read under its row lock, on the ORM path) past what their columns hold
    (:func:`~cortex_sessions.usage.check_totals`, docs/design.md §16.1); on SQLite ``cost``
    stays below :data:`~cortex_sessions.usage.SQLITE_MAX_TOTAL_COST`.

    Args:
        session: the locked session.
        added: what the write adds to its totals.
        using: the database alias the write goes to.
        field: the input field named in the error.

    Raises:
        UsageTotalOverflow: a total would not fit.
    """
    current = Totals(
        session.input_tokens, session.output_tokens, session.cost, session.context_tokens
    )
    sqlite = connections[using].vendor == "sqlite"
    check_totals(
        current, added, max_cost=SQLITE_MAX_TOTAL_COST if sqlite else MAX_TOTAL_COST, field=field
    )


def total_overflow(exc: BaseException, using: str) -> UsageTotalOverflow | None:
    """What a one-statement append on PostgreSQL (docs/design.md §14) raises when the database
    refused it because a session's usage total would pass its column (SQLSTATE 22003: ``cost``
    past ``numeric(20, 6)``, a token total past ``bigint``; docs/design.md §16.1): the statement
    wrote nothing. Inside a caller's ``atomic()`` block the block is marked for rollback, as
    the database aborted its transaction (a query before the block ends then raises Django's
    ``TransactionManagementError`` rather than the database's error).

    Args:
        exc: the exception the append's statement raised.
        using: the database alias of the statement.

    Returns:
        :class:`~cortex_sessions.exceptions.UsageTotalOverflow` to raise (``from exc``), or
        ``None`` when ``exc`` is another error.
    """
    if not is_out_of_range(exc):
        return None
    if transaction.get_connection(using).in_atomic_block:
        transaction.set_rollback(True, using=using)
    return UsageTotalOverflow(field="messages")


def _manages_transactions_by_hand(using: str) -> bool:
    """Whether the host manages the transaction on database ``using`` by hand: autocommit
    turned off with ``transaction.set_autocommit(False)``, whether or not ``atomic()`` blocks
    run inside it. An ``atomic()`` block entered in autocommit mode (``ATOMIC_REQUESTS``, a
    host's, the service's own) turns autocommit off too, but Django commits at its end
    (``commit_on_exit``) and runs the ``on_commit`` callbacks then."""
    connection = transaction.get_connection(using)
    if connection.get_autocommit():
        return False
    return not (connection.in_atomic_block and connection.commit_on_exit)


#: The signals :func:`_signals_held` blocks hold (the innermost block's list), under manual
#: transaction management; ``None`` outside such a block.
_held_signals: ContextVar[list[tuple[Any, dict[str, Any]]] | None] = ContextVar(
    "cortex_sessions_held_signals", default=None
)


@contextmanager
def _signals_held() -> Iterator[None]:
    """Around an ``atomic()`` block of the app's own that calls services and may still roll
    back after one of them wrote (a keyed write that loses its key's race and is replayed, an
    import that fails at a later message): under manual transaction management the signals
    those services send (at the write, see :func:`_send_on_commit`) wait for the block to end
    without an exception, then go to an enclosing such block or to the receivers; an exception
    drops them with the writes they describe. In autocommit mode Django's ``on_commit`` does
    this already (a rolled-back savepoint drops its callbacks), so nothing is held there."""
    held: list[tuple[Any, dict[str, Any]]] = []
    token = _held_signals.set(held)
    try:
        yield
    finally:
        _held_signals.reset(token)
    outer = _held_signals.get()  # reached only when the block ended without an exception
    if outer is not None:
        outer.extend(held)
    else:
        for signal, kwargs in held:
            _send_in_callers_transaction(signal, kwargs)


def send_on_commit(signal: Any, **kwargs: Any) -> None:
    """Send ``signal`` once the current transaction commits, never letting a receiver fail the
    caller (docs/design.md §12.2).

    Receivers run through ``Signal.send_robust``: one that raises is logged on the
    ``cortex_sessions`` logger (with its traceback) and the others still run. The write has
    committed by then, so a receiver's error never changes an API response, nor stops an
    import or a backfill. Outside a transaction the signal is sent at once, with the same rules.

    Under manual transaction management (:func:`_manages_transactions_by_hand`) Django has no
    on-commit hook (``on_commit`` raises outside ``atomic()``, and inside one keeps the callback
    until autocommit is turned back on, dropping it at any later rollback, even of other work),
    and the host commits when it chooses: the receivers run at the write, as Django's own model
    signals do (after the app's own enclosing block, see :func:`_signals_held`), through
    :func:`_send_in_callers_transaction`.

    Args:
        signal: a :mod:`cortex_sessions.signals` signal.
        kwargs: the signal's arguments (``sender`` is always :class:`~cortex_sessions.models.Session`).

    Raises:
        django.db.DatabaseError: under manual transaction management only, when a receiver's
            database error ended the caller's transaction (see
            :func:`_send_in_callers_transaction`).
    """
    if not has_receivers(signal):
        return  # as Django's own model signals: receivers are those connected at the write
    alias = _db_for_write()
    if not _manages_transactions_by_hand(alias):
        transaction.on_commit(
            lambda: _send_robust(signal, kwargs, "has committed and stands"), using=alias
        )
        return
    held = _held_signals.get()
    if held is not None:
        held.append((signal, kwargs))
    else:
        _send_in_callers_transaction(signal, kwargs)


def has_receivers(signal: Any) -> bool:
    """Whether a receiver of ``signal`` (a :mod:`cortex_sessions.signals` signal, sent by
    :class:`~cortex_sessions.models.Session`) is connected now: what :func:`send_on_commit`
    sends to. A write that builds its signal's payload only for it (the adapters' appends,
    docs/design.md §9, §14) asks this first; ``signal.receivers`` is read first because
    ``has_listeners`` takes Django's lock and clears dead references.
    """
    return bool(signal.receivers) and signal.has_listeners(Session)


#: The name the services modules import (:func:`send_on_commit`).
_send_on_commit = send_on_commit


def _send_robust(signal: Any, kwargs: dict[str, Any], stands: str) -> list[Exception]:
    """``signal.send_robust`` with each receiver's error logged (``stands`` says what became of
    the write); returns those errors."""
    errors = []
    for receiver, result in signal.send_robust(sender=Session, **kwargs):
        if isinstance(result, Exception):
            errors.append(result)
            logger.error(
                "A receiver of a cortex_sessions signal raised; the write it follows %s "
                "(receiver %r).",
                stands,
                receiver,
                exc_info=(type(result), result, result.__traceback__),
            )
    return errors


def _send_in_callers_transaction(signal: Any, kwargs: dict[str, Any]) -> None:
    """Run ``signal``'s receivers now, inside a savepoint of the caller's transaction (manual
    transaction management, docs/design.md §12.2).

    When one of them fails with a database error (on PostgreSQL that leaves the transaction
    unusable, even when the receiver catches it; Django marks an ``atomic()`` block for
    rollback), what the signal's receivers wrote is rolled back to the savepoint, the error is
    logged, and the caller's transaction, the write included, goes on (Django's SQLite backend
    makes savepoints only inside ``atomic()``: outside one, what the receivers ran stays and
    only their errors are logged). It uses Django's savepoint functions, not ``atomic()``:
    entering an outermost ``atomic()`` in this mode clears the connection's rollback mark, and
    one whose savepoint cannot be made leaves the connection in a block nobody exits.

    Raises:
        django.db.DatabaseError: the transaction is gone (InnoDB's deadlock victim, a lost
            connection), and the write with it: no savepoint can be made, or rolled back to
            after a receiver's database error (that error is raised, else the refusal). The
            caller must roll back, as after its own statement failed so.
    """
    alias = _db_for_write()
    connection = transaction.get_connection(alias)
    savepoint = _savepoint_create(using=alias)
    errors = _send_robust(signal, kwargs, "is the caller's to commit (manual transactions)")
    if savepoint is None:  # Django makes none on SQLite outside atomic(): what ran, stays
        return
    failed = next((error for error in errors if isinstance(error, DatabaseError)), None)
    if failed is None and not connection.needs_rollback:
        try:
            transaction.savepoint_commit(savepoint, using=alias)
            return
        except DatabaseError as refused:  # a receiver caught its own error (PostgreSQL)
            failed = refused
    # What marked a block for rollback (an ORM error inside an atomic() block, set_rollback)
    # is undone by this rollback; cleared first, as atomic() does before rolling back to its
    # own savepoint (Django refuses statements while it is set).
    connection.needs_rollback = False
    try:
        transaction.savepoint_rollback(savepoint, using=alias)
    except DatabaseError as refused:
        connection.needs_rollback = connection.in_atomic_block  # the caller's block must not commit
        raise (failed or refused) from None  # the transaction, and the write, are gone
    logger.error(
        "A receiver of a cortex_sessions signal failed with a database error under manual "
        "transaction management; what the signal's receivers wrote was rolled back, the write "
        "it follows stands in the caller's transaction.",
    )
