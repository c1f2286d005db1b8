"""The graph's ``messages`` channel mirrored into the session's messages (docs/design.md §19.1).

When a checkpoint of the root namespace updates the messages channel, the messages the channel
holds that its value at the parent checkpoint did not (by LangChain message ``id``; by equality
for a message without one) are appended to the session, stored as the LangChain adapter stores
them (:mod:`cortex_sessions.integrations.langchain.messages`). The saver calls this in the
transaction that inserts the checkpoint row, and only when the row is new, so a repeated ``put``
of one checkpoint mirrors nothing twice. Edits and removals of earlier messages (a
``RemoveMessage``, an update with the same id) are not mirrored: the session keeps what was said.

The channel's value at a checkpoint this process stored is remembered (:func:`remember`, the
latest checkpoint of each of the last ``REMEMBERED`` threads), so the next ``put`` of the
thread finds its parent's messages without reading the parent's blob back and decoding it;
another process's checkpoint (or a forgotten one) is read from the database as before.
"""

from __future__ import annotations

import operator
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, NamedTuple

from langchain_core.messages import BaseMessage

from ... import services
from ...conf import app_settings
from ...exceptions import InvalidInput
from ...models import Session
from ..langchain.messages import built_message, to_cortex

__all__ = [
    "MISSING",
    "MirroredRow",
    "forget",
    "mirror_messages",
    "mirrored_rows",
    "new_messages",
    "recall",
    "remember",
]

#: A message's ``id``.
_ID = operator.attrgetter("id")

#: Threads whose latest checkpoint's messages :func:`remember` keeps.
REMEMBERED = 1024
#: What :func:`recall` returns for a checkpoint it does not remember.
MISSING: Any = object()

_remembered: OrderedDict[tuple[str, uuid.UUID], tuple[str, Any]] = OrderedDict()
_lock = threading.Lock()


def remember(alias: str, session_id: uuid.UUID, checkpoint_id: str, value: Any) -> None:
    """Keep ``value``, the messages channel's value at the root-namespace checkpoint
    ``checkpoint_id`` of the session just stored on database ``alias`` (a copy of a list; one
    checkpoint per thread, the last ``REMEMBERED`` threads)."""
    kept = tuple(value) if isinstance(value, list | tuple) else value
    with _lock:
        _remembered[(alias, session_id)] = (checkpoint_id, kept)
        _remembered.move_to_end((alias, session_id))
        while len(_remembered) > REMEMBERED:
            _remembered.popitem(last=False)


def recall(alias: str, session_id: uuid.UUID, checkpoint_id: str) -> Any:
    """The value :func:`remember` kept for that checkpoint, or :data:`MISSING`."""
    with _lock:
        found = _remembered.get((alias, session_id))
    if found is None or found[0] != checkpoint_id:
        return MISSING
    return found[1]


def forget(session_id: uuid.UUID) -> None:
    """Drop what :func:`remember` kept for the session (its thread was deleted)."""
    with _lock:
        for key in [key for key in _remembered if key[1] == session_id]:
            del _remembered[key]


class MirroredRow(NamedTuple):
    """One validated message to mirror: its column values (as ``services.append_messages``
    stores them) and its ``content``, ``metadata`` and ``usage`` as JSON text (``usage``
    ``None``: NULL)."""

    columns: dict[str, Any]
    content_json: str
    metadata_json: str
    usage_json: str | None


def mirrored_rows(fresh: Sequence[BaseMessage], now: datetime) -> list[MirroredRow] | None:
    """``fresh`` validated as ``services.append_messages`` validates its input (``now``: their
    ``created_at``), for the one-statement put of ``_pg_writes``.

    Returns:
        The rows, or ``None`` when one is refused or there are more than
        ``MAX_MESSAGES_PER_APPEND``: the ORM path then raises the error as it always has,
        and only when the checkpoint is new.
    """
    if len(fresh) > app_settings.MAX_MESSAGES_PER_APPEND:
        return None
    rows = []
    try:
        for message in fresh:
            built = built_message(message, now)  # its record walked once
            rows.append(
                MirroredRow(
                    built.columns, built.content_json, built.metadata_json, built.usage_json
                )
            )
    except InvalidInput:
        return None
    return rows


def check_written(writes: Sequence[tuple[str, Any]], channel: str, now: datetime) -> None:
    """Refuse pending ``writes`` whose messages the mirror could not store: each message
    (``BaseMessage``) written to ``channel``, alone or in a list, validated as
    :func:`mirrored_rows` validates it. A refused write stored anyway would be applied by
    every later step and refused by every ``put``: the thread could not go on (a resume
    raises again without running the node). Other values (message-likes the reducer turns
    into messages) are checked when the ``put`` mirrors them.

    Raises:
        InvalidContent, MessageTooLarge, …: what ``services.append_messages`` raises for the
            message; nothing is written.
    """
    for name, value in writes:
        if name != channel:
            continue
        for message in value if isinstance(value, list | tuple) else (value,):
            if isinstance(message, BaseMessage):
                built_message(message, now)


def new_messages(current: Any, previous: Any) -> list[BaseMessage]:
    """The messages of ``current`` that ``previous`` did not hold, in order: by LangChain
    message ``id``, and a message without one by equality, each earlier message matching one
    (a repeated "yes" is a new turn); ``RemoveMessage`` never (docs/design.md §19.1).

    Args:
        current: the channel's value at the new checkpoint (a list of messages, normally).
        previous: its value at the parent checkpoint, or ``None``.

    Returns:
        The new ``BaseMessage`` objects; ``[]`` when ``current`` is not a list.
    """
    if not isinstance(current, Sequence) or isinstance(current, str | bytes):
        return []
    before = previous if isinstance(previous, Sequence) and previous is not None else ()
    seen: set[Any]
    anonymous: list[BaseMessage]
    if all(issubclass(kind, BaseMessage) for kind in set(map(type, before))):
        # every item a message (the channel's reducer makes them so): their ids read in C,
        # without an isinstance check (BaseMessage's, through ABCMeta) per item
        ids = list(map(_ID, before))
        seen = set(ids)
        seen.discard(None)
        seen.discard("")
        anonymous = [] if all(ids) else [m for m, i in zip(before, ids, strict=True) if not i]
    else:
        seen, anonymous = set(), []
        for m in before:
            if isinstance(m, BaseMessage):
                if m.id:
                    seen.add(m.id)
                else:
                    anonymous.append(m)
    # A value that starts with the previous one (its own objects, as the channel's reducer
    # keeps them and as remembered values are, or equal ones, decoded from the parent's blob)
    # holds new messages only after it: those are every message there but one of a seen id.
    # Otherwise each earlier message without an id stands for one equal message of the value,
    # so a second "yes" a user sends is new, as its own turn (a multiset, not a set).
    left: list[BaseMessage] = []
    start = len(before)
    if not (
        0 < start <= len(current)
        and (all(map(operator.is_, before, current)) or _equal_prefix(before, current))
    ):
        start, left = 0, anonymous
    fresh = []
    for m in current[start:] if start else current:
        if not isinstance(m, BaseMessage) or m.type == "remove":
            continue
        if m.id:
            if m.id in seen:
                continue
        elif left and m in left:
            left.remove(m)  # the earlier one it repeats, counted once
            continue
        fresh.append(m)
    return fresh


def _equal_prefix(before: Sequence[Any], current: Sequence[Any]) -> bool:
    """Whether ``current`` starts with items equal to ``before``'s, in order."""
    return all(map(operator.eq, before, current))


def mirror_messages(
    session: Session,
    current: Any,
    previous: Callable[[], Any],
) -> int:
    """Append the new messages of the channel to ``session`` (in the caller's transaction).

    Args:
        session: the thread's session (locked by the caller).
        current: the channel's value at the new checkpoint.
        previous: returns its value at the parent checkpoint (called only when needed).

    Returns:
        How many messages were appended.

    Raises:
        SessionArchived: the session is archived.
        InvalidInput (InvalidContent, MessageTooLarge, …): a message cannot be stored.
    """
    if not isinstance(current, Sequence) or not current:
        return 0
    fresh = new_messages(current, previous())
    if not fresh:
        return 0
    rows = [to_cortex(message) for message in fresh]
    batch = app_settings.MAX_MESSAGES_PER_APPEND
    for start in range(0, len(rows), batch):
        services.append_messages(
            scope=session.scope, session_id=session.pk, messages=rows[start : start + batch]
        )
    return len(rows)
