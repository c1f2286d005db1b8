"""The one place that reads the database for session references (docs/design.md §8.3-§8.8).

Everything else in this package is pure; this module turns ``Session`` and ``Message`` rows into
the inputs of :func:`~.retention.retain_snapshot` and stores the prepared result.

How one referenced session is read (all references of a message in one read transaction,
``REPEATABLE READ`` on PostgreSQL when the call is not already inside a transaction):

1. the session row, within the caller's scope (missing and out of scope are the same
   ``SESSION_REFERENCE_READ_FAILED``);
2. ``captured_through_seq`` — the highest ``seq`` of any of its messages — and every later query
   is bounded by it, so a message appended meanwhile never half-appears;
3. the newest checkpoint (``role=user``, ``source=checkpoint``), content included;
4. a ``COUNT`` of the conversation messages from the checkpoint on (the checkpoint included);
5. the conversation messages after the checkpoint, newest first, in keyset-paginated chunks
   whose size follows the bytes still free in the budget, pulled lazily by retention, which
   abandons the generator as soon as nothing more fits.

So the rows read are the checkpoint, the retained messages, the one message that did not fit
and at most a few more from the last chunk — never the whole session. Each step is served by an
index (``cortex_msg_checkpoint_idx``, ``cortex_msg_conversation_idx`` and the unique
``(session, seq)``).
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from django.db import connections, transaction
from django.db.models import Case, IntegerField, Max, Q, TextField, Value, When
from django.db.models.functions import Cast, Replace

from .. import routing, services
from ..conf import app_settings
from ..content import content_text, normalize_content
from ..counters import CONVERSATION_Q
from ..exceptions import InvalidFilter
from ..models import Message, Session
from ..scope import Scope
from ..services._common import _in_callers_transaction
from .candidates import CandidateRow, build_candidate
from .errors import InvalidReference, InvalidReferenceConfig, ReferenceReadFailed
from .preparation import (
    check_cancelled,
    normalize_inputs,
    readable_content,
    validate_max_reference_bytes,
    validate_max_references,
)
from .rendering import build_prepared_message
from .retention import retain_snapshot
from .types import (
    CancelToken,
    Deadline,
    PreparedReferencedMessage,
    ReferenceSnapshot,
    SessionReferenceInput,
    SourceMessage,
)

__all__ = [
    "CONTEXT_METADATA_KEY",
    "ReadStats",
    "append_message_with_references",
    "prepare_references",
    "reference_candidates",
]

#: Key of the context message's metadata that holds the context's ``source`` record (§8.7).
CONTEXT_METADATA_KEY = "source"

#: Rows in the first chunk of a referenced session's messages, before any size is known.
_FIRST_CHUNK = 8
#: Bounds of later chunks.
_MIN_CHUNK, _MAX_CHUNK = 4, 1000
_MESSAGE_COLUMNS = ("seq", "role", "source", "content")


@dataclass
class ReadStats:
    """What preparation read from the database, for diagnostics and the benchmark.

    Attributes:
        sessions: referenced sessions read.
        rows: message rows fetched, the checkpoint included, over all references.
        text_bytes: UTF-8 bytes of the text (docs/design.md §3.2) of those rows.
        queries: message queries issued (max seq, checkpoint, count, one per chunk).
        per_reference: ``{"rows", "text_bytes", "queries"}`` for each reference, in order.
    """

    sessions: int = 0
    rows: int = 0
    text_bytes: int = 0
    queries: int = 0
    per_reference: list[dict[str, int]] = field(default_factory=list)

    def count_row(self, content: Any) -> int:
        """Record one fetched row; returns the UTF-8 bytes of its text."""
        size = len(content_text(content).encode("utf-8", "surrogatepass"))
        self.rows += 1
        self.text_bytes += size
        return size


# -- helpers --------------------------------------------------------------------------------------


def _canonical_id(session_id: str, where: str) -> str:
    """``str(UUID(session_id))``: the canonical spelling of a session id.

    Args:
        session_id: the id as given (any spelling ``uuid.UUID`` accepts).
        where: the reference's place in the request, for the error message
            (``"references[2]"``, ``"a mention"``).

    Raises:
        InvalidReference: ``session_id`` does not spell a UUID, so it can name no session of
            this store — a malformed input (400), not a missing session (§8.3, §8.9).
    """
    try:
        return str(uuid.UUID(session_id))
    except (ValueError, AttributeError, TypeError):
        raise InvalidReference(
            f"{where} has a session_id that is not a session id (a UUID).", field="references"
        ) from None


def _as_input(item: Any, index: int) -> SessionReferenceInput:
    """One explicit reference: a :class:`SessionReferenceInput`, a mapping with ``session_id``
    and optional ``label``, or a bare id string. A label may not contain NUL: it is stored in
    the context message's metadata, and no database stores NUL (labels parsed from mentions
    come from content, which is already checked)."""
    if isinstance(item, SessionReferenceInput):
        reference = item
    elif isinstance(item, str):
        reference = SessionReferenceInput(item)
    elif isinstance(item, Mapping):
        unknown = set(item) - {"session_id", "label"}
        if unknown or "session_id" not in item:
            raise InvalidReference(
                f"references[{index}] must be an object with 'session_id' and optional 'label'.",
                field="references",
            )
        reference = SessionReferenceInput(item["session_id"], item.get("label"))
    else:
        raise InvalidReference(
            f"references[{index}] is not a session reference.", field="references"
        )
    if reference.label is not None and "\x00" in reference.label:
        raise InvalidReference(
            f"references[{index}] has a label with a NUL character.", field="references"
        )
    return reference


def _canonical_input(reference: SessionReferenceInput, where: str) -> SessionReferenceInput:
    canonical = _canonical_id(reference.session_id, where)
    if canonical == reference.session_id:
        return reference
    return SessionReferenceInput(canonical, reference.label)


def _settings() -> tuple[int, int]:
    """``(MAX_REFERENCES, MAX_REFERENCE_BYTES)``, validated (``InvalidReferenceConfig``)."""
    return (
        validate_max_references(app_settings.MAX_REFERENCES),
        validate_max_reference_bytes(app_settings.MAX_REFERENCE_BYTES),
    )


@contextmanager
def _read_transaction(using: str) -> Iterator[None]:
    """The transaction all reads of one preparation share. When it is the outermost transaction
    on PostgreSQL it is ``REPEATABLE READ, READ ONLY``, so every query sees one snapshot; nested
    in a caller's transaction (an ``atomic()`` block, or manual transaction management) it runs
    in that one."""
    connection = connections[using]
    outermost = not _in_callers_transaction(using)
    with transaction.atomic(using=using):
        if outermost and connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        yield


# -- reading one referenced session ---------------------------------------------------------------


def _newest_first(
    messages: Any,
    *,
    floor: int,
    ceiling: int,
    budget: int,
    stats: ReadStats,
    cancel_token: CancelToken | None,
    deadline: Deadline | None,
) -> Iterator[SourceMessage]:
    """Conversation messages with ``floor < seq <= ceiling``, newest first, read in keyset chunks.

    The first chunk is small; each later one is sized to the bytes still free in ``budget``
    at the average text size seen so far (plus a little), so the rows fetched past the last
    retained message stay few. Checks for cancellation before every chunk.
    """
    upper = ceiling
    size = _FIRST_CHUNK
    text_seen = rows_seen = 0
    while True:
        check_cancelled(cancel_token=cancel_token, deadline=deadline)
        stats.queries += 1
        chunk = list(
            messages.filter(CONVERSATION_Q, seq__gt=floor, seq__lte=upper)
            .order_by("-seq")
            .values_list(*_MESSAGE_COLUMNS)[:size]
        )
        for seq, role, source, content in chunk:
            text_seen += stats.count_row(content)
            rows_seen += 1
            yield SourceMessage(seq, role, source, content)
        if len(chunk) < size:
            return
        upper = chunk[-1][0] - 1
        average = max(text_seen / rows_seen, 1.0)
        free = max(budget - text_seen, 0)
        size = min(max(math.ceil(free / average) + 2, _MIN_CHUNK), _MAX_CHUNK)


def _read_snapshot(
    reference: SessionReferenceInput,
    *,
    scope: Scope | str,
    using: str,
    max_bytes: int,
    stats: ReadStats,
    cancel_token: CancelToken | None,
    deadline: Deadline | None,
) -> ReferenceSnapshot:
    """Read and retain one referenced session (see the module docstring for the steps).

    Raises:
        ReferenceReadFailed: the session is missing or outside ``scope``.
        ReferenceBudgetExceeded, ReferenceCancelled: from retention and the chunk reader.
    """
    pk = uuid.UUID(reference.session_id)  # canonical: checked by _canonical_input
    row = Session.objects.using(using).within(scope).filter(pk=pk).values_list("cwd").first()
    if row is None:
        raise ReferenceReadFailed(session_id=reference.session_id)
    (cwd,) = row
    before = (stats.rows, stats.text_bytes, stats.queries)
    messages = Message.objects.using(using).filter(session_id=pk)
    stats.queries += 1
    captured = messages.aggregate(top=Max("seq"))["top"] or 0
    stats.queries += 1
    checkpoint_row = (
        messages.filter(role=Message.Role.USER, source=Message.Source.CHECKPOINT, seq__lte=captured)
        .order_by("-seq")
        .values_list(*_MESSAGE_COLUMNS)
        .first()
    )
    checkpoint = None
    floor = 0
    if checkpoint_row is not None:
        stats.count_row(checkpoint_row[3])
        checkpoint = SourceMessage(*checkpoint_row)
        floor = checkpoint.seq
    stats.queries += 1
    window_count = messages.filter(
        CONVERSATION_Q, seq__gte=max(floor, 1), seq__lte=captured
    ).count()
    snapshot = retain_snapshot(
        session_id=reference.session_id,
        label=reference.label,
        cwd=cwd,
        captured_through_seq=captured,
        checkpoint=checkpoint,
        newest_first=_newest_first(
            messages,
            floor=floor,
            ceiling=captured,
            budget=max_bytes,
            stats=stats,
            cancel_token=cancel_token,
            deadline=deadline,
        ),
        window_count=window_count,
        max_bytes=max_bytes,
    )
    stats.sessions += 1
    stats.per_reference.append(
        {
            "rows": stats.rows - before[0],
            "text_bytes": stats.text_bytes - before[1],
            "queries": stats.queries - before[2],
        }
    )
    return snapshot


# -- public API -----------------------------------------------------------------------------------


def reference_candidates(
    *,
    scope: Scope | str,
    session_id: uuid.UUID | str,
    query: str = "",
    limit: int | None = None,
) -> list[dict[str, Any]]:
    """Sessions the user may mention in ``session_id``, for the mention picker (docs/design.md §8.4).

    Live (not archived, docs/design.md §11.2) sessions at or beneath ``scope`` other than the
    current one, filtered by a case-insensitive substring of their id, cwd or title (never
    message text; ``%`` and ``_`` match literally; dashes are ignored when matching the id, so
    every database matches ids alike), ranked: same
    cwd as the current session, then sessions without a cwd (null or empty), then the rest;
    most recently created first within a rank, then by descending id. Ordered and cut in SQL.

    Args:
        scope: the caller's scope.
        session_id: the current session (the one the message is written in); must lie within
            ``scope``.
        query: the filter text; surrounding whitespace is ignored; empty matches every session.
        limit: most candidates returned, ``>= 1``; default and ceiling ``CANDIDATE_LIMIT``.

    Returns:
        Dicts ``{"session_id", "label", "cwd", "created_at" (Unix epoch ms), "same_workspace",
        "mention"}`` as built by :func:`~.candidates.build_candidate`.

    Raises:
        NoScope, InvalidScope: bad scope.
        SessionNotFound: the current session is missing or outside ``scope``.
        InvalidFilter: ``limit`` is not a positive integer, or ``query`` is not a string or
            holds a NUL character.
        InvalidReferenceConfig: ``CANDIDATE_LIMIT`` is not a positive integer.
    """
    ceiling = app_settings.CANDIDATE_LIMIT
    if isinstance(ceiling, bool) or not isinstance(ceiling, int) or ceiling < 1:
        raise InvalidReferenceConfig(f"CANDIDATE_LIMIT must be a positive integer: {ceiling!r}.")
    if limit is None:
        limit = ceiling
    elif isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise InvalidFilter("limit must be a positive integer.", field="limit")
    if not isinstance(query, str) or "\x00" in query:
        raise InvalidFilter("q must be a string without NUL characters.", field="q")
    current = services.get_session(scope=scope, session_id=session_id)
    current_cwd = current.cwd or None
    # Archived sessions are put away: never offered for a mention (docs/design.md §11.2).
    queryset = (
        Session.objects.using(routing.db_for_read(Session, scope=scope))
        .within(scope)
        .exclude(pk=current.pk)
        .filter(archived_at__isnull=True)
    )
    query = query.strip()
    if query:
        matches = Q(title__icontains=query) | Q(cwd__icontains=query)
        id_query = query.replace("-", "")
        if id_query:
            queryset = queryset.annotate(
                id_hex=Replace(
                    Cast("id", TextField()), Value("-"), Value(""), output_field=TextField()
                )
            )
            matches |= Q(id_hex__icontains=id_query)
        queryset = queryset.filter(matches)
    whens = [When(Q(cwd__isnull=True) | Q(cwd=""), then=Value(1))]
    if current_cwd is not None:
        whens.insert(0, When(cwd=current_cwd, then=Value(0)))
    rows = (
        queryset.annotate(rank=Case(*whens, default=Value(2), output_field=IntegerField()))
        .order_by("rank", "-created_at", "-id")
        .values_list("id", "title", "cwd", "created_at")[: min(limit, ceiling)]
    )
    return [
        build_candidate(CandidateRow(str(pk), title, cwd, created_at), current_cwd=current_cwd)
        for pk, title, cwd, created_at in rows
    ]


def prepare_references(
    *,
    scope: Scope | str,
    session_id: uuid.UUID | str,
    content: Any,
    references: Iterable[SessionReferenceInput | Mapping[str, Any] | str] | None = (),
    cancel_token: CancelToken | None = None,
    deadline: Deadline | None = None,
    read_stats: ReadStats | None = None,
) -> PreparedReferencedMessage:
    """Prepare a user message of ``session_id`` with its session references, without storing
    anything (docs/design.md §8.3, §8.5-§8.7).

    Mentions inside the text blocks of ``content`` are parsed and made readable (``@label``);
    their references follow the explicit ``references``. Ids are canonicalized
    (``str(UUID(id))``; one that spells no UUID is ``InvalidReference``) before duplicates are
    dropped (first wins, its position is the ``input_index``). Each distinct reference is read
    within ``scope`` — one read transaction for all — projected from its newest checkpoint,
    retained into ``MAX_REFERENCE_BYTES`` and rendered into one aggregated context.

    Args:
        scope: the caller's scope; referenced sessions must lie at or beneath it.
        session_id: the session the message belongs to (must lie within ``scope``).
        content: the message content, a string or a list of content blocks (docs/design.md §3.2).
        references: explicit references — :class:`SessionReferenceInput`, ``{"session_id",
            "label"?}`` mappings or id strings — in the order the host selected them (a list
            or tuple; ``None`` means none).
        cancel_token: checked between references and between read chunks.
        deadline: a monotonic-clock deadline, checked at the same points.
        read_stats: optional collector of rows and text bytes read (diagnostics, benchmark).

    Returns:
        :class:`PreparedReferencedMessage`: the readable content blocks and ``contexts`` —
        ``[]`` without references, otherwise one context ``{"role": "user", "source": {...},
        "content": [{"type": "text", "text": <prompt>}]}``.

    Raises:
        InvalidReferenceConfig: ``MAX_REFERENCES`` or ``MAX_REFERENCE_BYTES`` is invalid.
        NoScope, InvalidScope: bad scope.
        InvalidContent, EmptyContent, NulCharacter: bad ``content``.
        InvalidReference: a malformed mention or reference input, or a ``session_id`` that
            is not a UUID.
        SessionNotFound: ``session_id`` is missing or outside ``scope``.
        SelfReference: a reference names ``session_id``.
        TooManyReferences: more than ``MAX_REFERENCES`` distinct references.
        ReferenceReadFailed: a referenced session is missing or outside ``scope`` (alike).
        ReferenceBudgetExceeded: a snapshot cannot fit ``MAX_REFERENCE_BYTES`` (UTF-8 bytes).
        ReferenceCancelled: ``cancel_token`` was cancelled or ``deadline`` passed.
    """
    max_references, max_bytes = _settings()
    stats = read_stats if read_stats is not None else ReadStats()
    # The current session first: a missing or foreign one is 404 whatever the body holds.
    current = services.get_session(scope=scope, session_id=session_id)
    blocks, parsed = readable_content(normalize_content(content))
    if references is None:
        references = ()
    if not isinstance(references, list | tuple):
        raise InvalidReference("references must be a list.", field="references")
    explicit = [_as_input(item, index) for index, item in enumerate(references)]
    inputs = [
        *(_canonical_input(item, f"references[{index}]") for index, item in enumerate(explicit)),
        *(_canonical_input(item, "a mention") for item in parsed),
    ]
    selected = normalize_inputs(
        inputs, current_session_id=str(current.pk), max_references=max_references
    )
    if not selected:
        return build_prepared_message(blocks, [])
    using = routing.db_for_read(Message, scope=scope)
    items: list[tuple[int, ReferenceSnapshot]] = []
    with _read_transaction(using):
        for input_index, reference in selected:
            check_cancelled(cancel_token=cancel_token, deadline=deadline)
            snapshot = _read_snapshot(
                reference,
                scope=scope,
                using=using,
                max_bytes=max_bytes,
                stats=stats,
                cancel_token=cancel_token,
                deadline=deadline,
            )
            items.append((input_index, snapshot))
    check_cancelled(cancel_token=cancel_token, deadline=deadline)
    return build_prepared_message(blocks, items)


def append_message_with_references(
    *,
    scope: Scope | str,
    session_id: uuid.UUID | str,
    content: Any,
    references: Iterable[SessionReferenceInput | Mapping[str, Any] | str] = (),
    metadata: Mapping[str, Any] | None = None,
    cancel_token: CancelToken | None = None,
    deadline: Deadline | None = None,
    usage: Mapping[str, Any] | None = None,
) -> services.AppendResult:
    """Prepare a user message with its references and store it durably (docs/design.md §8.8).

    Stores, in one :func:`cortex_sessions.services.append_messages` call (one transaction
    under the session's row lock), the readable user message (``role=user``, ``source=user``,
    ``metadata`` as given) and, when it references anything, its context message right after
    it: ``role=user``, ``source=session-reference``, the context's content, and the context's
    ``source`` record under ``metadata["source"]``. Replay reads the stored snapshot and never
    the referenced sessions again, so later changes to them do not change it. If preparation
    fails nothing is written.

    Args:
        scope, session_id, content, references, cancel_token, deadline: as for
            :func:`prepare_references`.
        metadata: host-owned JSON object for the user message.
        usage: the user message's ``usage`` (docs/design.md §16.1), or ``None``.

    Returns:
        :class:`~cortex_sessions.services.AppendResult` with one or two new messages.

    Raises:
        Everything :func:`prepare_references` raises, and what
        :func:`~cortex_sessions.services.append_messages` raises (``InvalidMetadata``,
        ``MessageTooLarge`` when ``MAX_MESSAGE_BYTES`` is below the context's size, …).
    """
    prepared = prepare_references(
        scope=scope,
        session_id=session_id,
        content=content,
        references=references,
        cancel_token=cancel_token,
        deadline=deadline,
    )
    messages = [
        services.MessageInput(
            role=Message.Role.USER,
            source=Message.Source.USER,
            content=prepared.content,
            metadata=metadata,
            usage=usage,
        )
    ]
    messages.extend(
        services.MessageInput(
            role=Message.Role.USER,
            source=Message.Source.SESSION_REFERENCE,
            content=context["content"],
            metadata={CONTEXT_METADATA_KEY: context["source"]},
        )
        for context in prepared.contexts
    )
    return services.append_messages(scope=scope, session_id=session_id, messages=messages)
