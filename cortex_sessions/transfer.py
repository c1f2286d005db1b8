"""Import and export of conversations as JSON Lines.

One conversation per line, a JSON object::

    {"id": "chat-1", "title": "Trip", "metadata": {}, "cwd": null,
     "messages": [{"role": "user", "content": "Hi!", "source": "user", "metadata": {},
                   "created_at": "2018-05-02T19:38:15+00:00"}, ...]}

Only ``messages`` is required (it may be empty). ``id`` is the conversation's external id (a
string or an integer): it is recorded in :class:`~cortex_sessions.models.ImportedConversation`,
so importing the same conversation again for the same agent and scope is skipped. Without an
``id`` every import creates a new session. A message's ``content`` is a string or a list of
content blocks; ``source`` and ``metadata`` are optional (defaults as in
:func:`cortex_sessions.services.append_messages`); ``created_at`` is an ISO 8601 timestamp, read
as UTC when it has no offset, and defaults to the time of import. Unknown keys are an error, so
a typo is never silently dropped.

The import goes through the services (``create_session`` and ``append_messages``), so every
rule and counter of the app holds; each conversation is imported in one transaction, so a
conversation is imported whole or not at all. The export writes the same format, reading
sessions and messages in bounded chunks, so that export followed by import into an empty
database reproduces titles, metadata, cwd and messages (role, source, content, metadata,
created_at) exactly. Session ids, the sessions' ``created_at`` and ``updated_at`` and the default
flag are not carried (``archived_at`` is, below).

The thread lifecycle (docs/design.md §11.1, §11.2) travels too, as optional keys written only when
set: ``archived_at`` (ISO 8601; the imported session is archived at that time) and the fork
provenance ``forked_from`` (the source session's id *in the exporting database*, kept as given:
like the column itself it is a plain id, never resolved) with ``forked_at_seq`` (an integer
``>= 0``); the two come together or not at all. Re-importing a file stays idempotent. So does
``expires_at`` (docs/design.md §18.1; ISO 8601, UTC without an offset); ``legal_hold`` is the
host's decision about a database's rows and does not travel.

A message's ``usage`` (docs/design.md §16.1) travels as an optional key, written only when set
and checked on import by the rules of the services (``invalid_usage``); the session totals are
the app's, recomputed from the imported messages, never read from the file. ``token_count``
is not carried: the importing database counts with its own ``TOKEN_COUNTER``.

A compaction summary (docs/design.md §16.3) carries ``compacts_through_seq``, counted in the
file's own numbering (the ``i``-th message of a line is seq ``i``, as the import numbers them):
the export renumbers it as a fork does, and the import marks the summary again and recomputes
``context_tokens`` in the conversation's transaction, so a round trip keeps every compaction
and the context read. It may only be on a ``user`` message of source ``checkpoint`` and lie
from 0 to the number of messages before it.

The export lives in :mod:`cortex_sessions.transfer_export`; its names are re-exported here.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from django.db import IntegrityError, router
from django.utils.dateparse import parse_datetime

from . import services
from .conf import app_settings
from .content import normalize_content, parse_json
from .exceptions import CortexSessionsError, InvalidConversation, InvalidThroughSeq
from .models import EXTERNAL_ID_MAX_BYTES, ImportedConversation, Message, Session
from .scope import Scope, canonical_of
from .services._common import _signals_held, _write_transaction
from .services.context import refresh_context_tokens
from .services.lifecycle import record_fork_provenance
from .transfer_export import (
    EXPORT_MESSAGE_CHUNK,
    EXPORT_SESSION_CHUNK,
    dump_conversation,
    export_conversations,
)
from .usage import check_usage

__all__ = [
    "CONVERSATION_KEYS",
    "EXPORT_MESSAGE_CHUNK",
    "EXPORT_SESSION_CHUNK",
    "MESSAGE_KEYS",
    "Conversation",
    "ImportReport",
    "LineError",
    "dump_conversation",
    "export_conversations",
    "import_conversation",
    "import_conversations",
    "parse_conversation",
]

#: Keys a conversation object may have.
CONVERSATION_KEYS = frozenset(
    {
        "id",
        "title",
        "metadata",
        "cwd",
        "messages",
        "archived_at",
        "forked_from",
        "forked_at_seq",
        "expires_at",
    }
)
#: Keys a message object may have.
MESSAGE_KEYS = frozenset(
    {"role", "content", "source", "metadata", "created_at", "usage", "compacts_through_seq"}
)
#: Messages handed to one ``append_messages`` call during an import (fewer when
#: ``MAX_MESSAGES_PER_APPEND`` is lower).
APPEND_BATCH = 500


@dataclass(frozen=True)
class Conversation:
    """One parsed line of a conversation file, ready for :func:`import_conversation`."""

    external_id: str | None
    title: str
    metadata: dict[str, Any] | None
    cwd: str | None
    messages: list[services.MessageInput]
    archived_at: datetime | None = None
    forked_from: uuid.UUID | None = None
    forked_at_seq: int | None = None
    expires_at: datetime | None = None
    #: The compaction summaries among ``messages`` (docs/design.md §16.3): ``(index in
    #: messages, compacts_through_seq)``, the latter counted in this file's numbering (the
    #: message at index ``i`` becomes seq ``i + 1``).
    compactions: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True)
class LineError:
    """A line that could not be imported: its 1-based number, error code and reason."""

    line: int
    code: str
    reason: str
    external_id: str | None = None

    def __str__(self) -> str:
        where = f"line {self.line}" + (f" (id {self.external_id!r})" if self.external_id else "")
        return f"{where}: {self.reason} [{self.code}]"


@dataclass
class ImportReport:
    """What :func:`import_conversations` did.

    Attributes:
        lines: non-blank lines read.
        imported: conversations imported (one session each).
        skipped: conversations whose ``id`` was already imported for this agent and scope.
        failed: lines not imported; each has an entry in ``errors``.
        messages: messages written.
        errors: the failed lines, in file order.
    """

    lines: int = 0
    imported: int = 0
    skipped: int = 0
    failed: int = 0
    messages: int = 0
    errors: list[LineError] = field(default_factory=list)


# -- parsing --------------------------------------------------------------------------------------


def _external_id(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not value.strip():
        raise InvalidConversation("id must be a non-empty string or an integer.", field="id")
    if any(ord(char) < 32 or ord(char) == 127 or 0xD800 <= ord(char) <= 0xDFFF for char in value):
        raise InvalidConversation(
            "id may not contain control characters or lone surrogates.", field="id"
        )
    size = len(value.encode("utf-8", "surrogatepass"))
    if size > EXTERNAL_ID_MAX_BYTES:
        raise InvalidConversation(
            f"id is {size} UTF-8 bytes; at most {EXTERNAL_ID_MAX_BYTES} are allowed.", field="id"
        )
    return value


def _created_at(value: Any, where: str, *, key: str = "created_at") -> datetime | None:
    if value is None:
        return None
    parsed = None
    if isinstance(value, str):
        try:
            parsed = parse_datetime(value)
        except ValueError:
            parsed = None
    if parsed is None:
        raise InvalidConversation(
            f"{where}.{key} must be an ISO 8601 timestamp, not {value!r}.",
            field=key,
        )
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def _message(item: Any, index: int) -> services.MessageInput:
    where = f"messages[{index}]"
    if not isinstance(item, Mapping):
        raise InvalidConversation(f"{where} must be an object.", field="messages")
    unknown = set(item) - MESSAGE_KEYS
    if unknown:
        raise InvalidConversation(
            f"{where} has unknown keys: {', '.join(sorted(unknown))}.", field="messages"
        )
    role = item.get("role")
    if role not in Message.Role.values:
        raise InvalidConversation(
            f"{where}.role must be one of {', '.join(Message.Role.values)}; got {role!r}.",
            field="role",
        )
    source = item.get("source")
    if source is not None and source not in Message.Source.values:
        raise InvalidConversation(
            f"{where}.source must be one of {', '.join(Message.Source.values)}; got {source!r}.",
            field="source",
        )
    try:
        normalize_content(item.get("content"))
        usage = check_usage(item.get("usage"))
    except CortexSessionsError as exc:
        exc.message = f"{where}: {exc.message}"
        exc.args = (exc.message,)
        raise
    return services.MessageInput(
        role=role,
        content=item.get("content"),
        source=source,
        metadata=item.get("metadata"),
        created_at=_created_at(item.get("created_at"), where),
        usage=usage,
    )


def _compaction(item: Mapping[str, Any], index: int) -> int | None:
    """The ``compacts_through_seq`` of ``messages[index]``, or ``None`` on an ordinary message:
    a compaction summary (role ``user``, source ``checkpoint``) standing for the messages of
    the file up to that position, an integer from 0 to ``index`` (what the export and a fork
    write: the number of messages up to the seq it stood for; docs/design.md §16.3)."""
    through = item.get("compacts_through_seq")
    if through is None:
        return None
    where = f"messages[{index}]"
    if not isinstance(through, int) or isinstance(through, bool) or not 0 <= through <= index:
        raise InvalidThroughSeq(
            f"{where}.compacts_through_seq must be an integer from 0 to {index} (the messages "
            f"before it); got {through!r}.",
            field="compacts_through_seq",
        )
    if (item.get("role"), item.get("source")) != ("user", "checkpoint"):
        raise InvalidConversation(
            f"{where} has compacts_through_seq, so it must be a compaction summary: role "
            "'user' and source 'checkpoint'.",
            field="compacts_through_seq",
        )
    return through


def _compactions(messages: list[Any]) -> tuple[tuple[int, int], ...]:
    """``(index, compacts_through_seq)`` of each summary in ``messages``, each standing for at
    least what the one before it stood for: a later compaction never covers less (§16.3; an
    export or a fork after deletes can make two equal, never smaller).

    Raises:
        InvalidThroughSeq, InvalidConversation: as :func:`_compaction`; or a summary covering
            fewer messages than an earlier one.
    """
    found: list[tuple[int, int]] = []
    for index, item in enumerate(messages):
        through = _compaction(item, index)
        if through is None:
            continue
        if found and through < found[-1][1]:
            raise InvalidThroughSeq(
                f"messages[{index}].compacts_through_seq must not be less than the previous "
                f"summary's ({found[-1][1]}, at messages[{found[-1][0]}]); got {through}.",
                field="compacts_through_seq",
            )
        found.append((index, through))
    return tuple(found)


def parse_conversation(line: str | bytes) -> Conversation:
    """Parse one line of a conversation file.

    Checks the shape (keys, roles, sources, content, timestamps); the values themselves (title
    length, metadata, message size) are checked by the services when the conversation is
    imported.

    Args:
        line: the JSON text of one conversation (bytes are decoded as UTF-8).

    Returns:
        The :class:`Conversation`.

    Raises:
        InvalidConversation: not UTF-8, not JSON, or not a conversation object; a message with
            ``compacts_through_seq`` that is not a summary (role ``user``, source
            ``checkpoint``).
        InvalidThroughSeq: a ``compacts_through_seq`` that is not an integer from 0 to the
            number of messages before it, or less than an earlier summary's.
        InvalidContent, EmptyContent, NulCharacter: a message's content is unusable (the message
            names the offending ``messages[i]``).
    """
    if isinstance(line, bytes):
        try:
            line = line.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidConversation(f"The line is not UTF-8: {exc}.") from None
    try:
        data = parse_json(line)
    except ValueError as exc:
        raise InvalidConversation(f"The line is not valid JSON: {exc}.") from None
    if not isinstance(data, dict):
        raise InvalidConversation(
            f"The line must be a JSON object, not {type(data).__name__}.",
        )
    unknown = set(data) - CONVERSATION_KEYS
    if unknown:
        raise InvalidConversation(f"Unknown keys: {', '.join(sorted(unknown))}.")
    external_id = _external_id(data.get("id"))
    messages = data.get("messages")
    if not isinstance(messages, list):
        raise InvalidConversation("messages must be a list of message objects.", field="messages")
    title = data.get("title")
    forked_from, forked_at_seq = _fork_provenance(
        data.get("forked_from"), data.get("forked_at_seq")
    )
    return Conversation(
        external_id=external_id,
        title="" if title is None else title,
        metadata=data.get("metadata"),
        cwd=data.get("cwd"),
        messages=[_message(item, index) for index, item in enumerate(messages)],
        compactions=_compactions(messages),
        archived_at=_created_at(data.get("archived_at"), "conversation", key="archived_at"),
        forked_from=forked_from,
        forked_at_seq=forked_at_seq,
        expires_at=_created_at(data.get("expires_at"), "conversation", key="expires_at"),
    )


def _fork_provenance(forked_from: Any, forked_at_seq: Any) -> tuple[uuid.UUID | None, int | None]:
    """Parse ``forked_from`` and ``forked_at_seq``: both or neither (docs/design.md §11.1)."""
    if forked_from is None and forked_at_seq is None:
        return None, None
    try:
        source = uuid.UUID(forked_from) if isinstance(forked_from, str) else None
    except ValueError:
        source = None
    if source is None:
        raise InvalidConversation(
            "forked_from must be a session id (a UUID string) given with forked_at_seq.",
            field="forked_from",
        )
    if (
        not isinstance(forked_at_seq, int)
        or isinstance(forked_at_seq, bool)
        or not 0 <= forked_at_seq <= services.MAX_INT64
    ):
        raise InvalidConversation(
            "forked_at_seq must be an integer >= 0 given with forked_from.", field="forked_at_seq"
        )
    return source, forked_at_seq


# -- import ---------------------------------------------------------------------------------------


def _already_imported(canonical: str, agent_id: str, external_id: str) -> bool:
    # Read where the import writes: a replica behind the last import would import it twice
    # (docs/design.md §17.1).
    using = router.db_for_write(Session)
    if (
        ImportedConversation.objects.using(using)
        .filter(agent_id=agent_id, scope=canonical, external_id=external_id)
        .exists()
    ):
        return True
    # The id an export gives a session that was never imported is the session's own id:
    # importing that file back into the same agent and scope finds the sessions themselves.
    try:
        session_pk = uuid.UUID(external_id)
    except ValueError:
        return False
    return (
        Session.objects.using(using)
        .filter(pk=session_pk, agent_id=agent_id, scope=canonical)
        .exists()
    )


def import_conversation(
    conversation: Conversation, *, scope: Scope | str, agent_id: str
) -> Session | None:
    """Import one conversation as a new session of ``agent_id`` at exactly ``scope``.

    The session, its messages and its import record are written in one transaction through
    :func:`services.create_session` and :func:`services.append_messages` (appends of at most
    ``MAX_MESSAGES_PER_APPEND`` messages, :data:`APPEND_BATCH` at most; the session is new,
    so until the commit no other writer waits on its lock; docs/design.md §12.6), so counters
    are exact and a failure leaves nothing behind; fork provenance and the archive time, when the line has
    them, are recorded in the same transaction (the session is archived last, after its messages).

    Args:
        conversation: a parsed line (:func:`parse_conversation`).
        scope: where the session is created.
        agent_id: the agent the session belongs to.

    Returns:
        The new session with its counters, or ``None`` when the conversation's ``id`` was already
        imported for this agent and scope (or is the id of a session already there).

    Raises:
        NoScope, InvalidScope, InvalidAgentId: bad target.
        InvalidInput and its subclasses: the services refused a value (title, metadata, cwd, a
            message).
    """
    canonical = canonical_of(scope)
    external_id = conversation.external_id
    if external_id is not None and _already_imported(canonical, agent_id, external_id):
        return None
    try:
        with _signals_held(), _write_transaction(router.db_for_write(Session)):
            session = services.create_session(
                scope=canonical,
                agent_id=agent_id,
                title=conversation.title,
                metadata=conversation.metadata,
                cwd=conversation.cwd,
            )
            messages = conversation.messages
            batch = min(APPEND_BATCH, app_settings.MAX_MESSAGES_PER_APPEND)
            for start in range(0, len(messages), batch):
                session = services.append_messages(
                    scope=canonical,
                    session_id=session.pk,
                    messages=messages[start : start + batch],
                ).session
            if conversation.compactions:
                session = _restore_compactions(session, conversation.compactions)
            if external_id is not None:
                ImportedConversation.objects.create(
                    session=session, agent_id=agent_id, scope=canonical, external_id=external_id
                )
            if conversation.forked_from is not None and conversation.forked_at_seq is not None:
                session = record_fork_provenance(
                    session,
                    forked_from=conversation.forked_from,
                    forked_at_seq=conversation.forked_at_seq,
                )
            if conversation.archived_at is not None:
                session = services.archive_session(
                    scope=canonical, session_id=session.pk, at=conversation.archived_at
                )
            if conversation.expires_at is not None:  # last: an expired session takes no append
                session = services.set_retention(
                    scope=canonical, session_id=session.pk, expires_at=conversation.expires_at
                )
    except IntegrityError:
        # A concurrent import of the same conversation committed first.
        if external_id is not None and _already_imported(canonical, agent_id, external_id):
            return None
        raise
    return session


def _restore_compactions(session: Session, compactions: tuple[tuple[int, int], ...]) -> Session:
    """Mark the summaries of the just imported ``session`` (docs/design.md §16.3), in the import's
    transaction: the message at index ``i`` of the file is seq ``i + 1`` of the new session,
    which no other writer has seen yet. ``context_tokens`` is then recomputed from the rows, as
    after a compaction."""
    using = router.db_for_write(Session)
    messages = Message.objects.using(using).filter(session=session)
    for index, through in compactions:
        messages.filter(seq=index + 1).update(compacts_through_seq=through)
    refresh_context_tokens(session, using=using)
    return session


def import_conversations(
    lines: Iterable[str | bytes],
    *,
    scope: Scope | str,
    agent_id: str,
    on_error: Callable[[LineError], None] | None = None,
    on_progress: Callable[[ImportReport], None] | None = None,
    progress_every: int = 100,
) -> ImportReport:
    """Import a conversation file, one conversation per line, continuing past bad lines.

    Lines are read lazily, so a file of any length is imported in bounded memory (one line at a
    time). Blank lines are ignored; a byte order mark before the first line is allowed. A bad
    line (not JSON, wrong shape, refused by the services) is counted as failed and reported
    with its line number; the lines before and after it are imported. Each conversation is
    imported in its own transaction (:func:`import_conversation`).

    Args:
        lines: the file's lines, as text or bytes (e.g. an open file).
        scope: the exact scope every session is created at.
        agent_id: the agent every session belongs to.
        on_error: called with each :class:`LineError` as it happens.
        on_progress: called with the running report every ``progress_every`` lines.
        progress_every: lines between progress calls (``0``: never).

    Returns:
        The :class:`ImportReport`.

    Raises:
        NoScope, InvalidScope: ``scope`` is missing or malformed (before anything is read).
        InvalidAgentId, NulCharacter, InvalidText: ``agent_id`` is not acceptable (before
            anything is read; :func:`~cortex_sessions.services.check_agent_id`).
    """
    canonical = canonical_of(scope)
    services.check_agent_id(agent_id)
    report = ImportReport()
    for number, raw in enumerate(lines, start=1):
        if number == 1:
            raw = (
                raw.removeprefix(b"\xef\xbb\xbf")
                if isinstance(raw, bytes)
                else raw.removeprefix("\ufeff")
            )
        if not raw.strip():
            continue
        report.lines += 1
        external_id = None
        try:
            conversation = parse_conversation(raw)
            external_id = conversation.external_id
            session = import_conversation(conversation, scope=canonical, agent_id=agent_id)
        except CortexSessionsError as exc:
            error = LineError(number, exc.code, exc.message, external_id)
            report.failed += 1
            report.errors.append(error)
            if on_error is not None:
                on_error(error)
        else:
            if session is None:
                report.skipped += 1
            else:
                report.imported += 1
                report.messages += len(conversation.messages)
        if on_progress is not None and progress_every and report.lines % progress_every == 0:
            on_progress(report)
    return report
