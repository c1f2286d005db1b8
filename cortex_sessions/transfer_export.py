"""Export of conversations as JSON Lines, the format :mod:`cortex_sessions.transfer` imports
(its module docs describe the keys); :mod:`cortex_sessions.transfer` re-exports these names.

A compaction summary (docs/design.md §16.3) is exported with ``compacts_through_seq``
renumbered as the import numbers the messages: the number of exported messages of its session
up to the seq it stands for (what a fork does, §11.1), so the imported copy keeps every
compaction and its ``context_tokens`` exactly.
"""

from __future__ import annotations

import json
import uuid
from array import array
from bisect import bisect_right
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from typing import Any, cast

from . import routing
from .models import Message, Session
from .scope import Scope

__all__ = [
    "EXPORT_MESSAGE_CHUNK",
    "EXPORT_SESSION_CHUNK",
    "dump_conversation",
    "export_conversations",
]

#: Sessions read per query during an export.
EXPORT_SESSION_CHUNK = 100
#: Messages read per query during an export.
EXPORT_MESSAGE_CHUNK = 500


def _isoformat(value: datetime) -> str:
    return value.astimezone(UTC).isoformat()


def _dumps(value: Any, ensure_ascii: bool) -> str:
    return json.dumps(value, ensure_ascii=ensure_ascii, separators=(",", ":"))


def dump_conversation(conversation: Mapping[str, Any], *, ensure_ascii: bool = False) -> str:
    """One line of a conversation file: ``conversation`` as compact JSON and a newline.

    For converters that write the import format (e.g. the example project's demo).

    Args:
        conversation: a conversation object (see the module docstring for the keys).
        ensure_ascii: escape every non-ASCII character.

    Raises:
        TypeError, ValueError: ``conversation`` is not JSON-serializable.
    """
    return _dumps(conversation, ensure_ascii) + "\n"


def _exported_message(row: Mapping[str, Any], exported: array[int]) -> dict[str, Any]:
    """One message of the export, ``usage`` only when it has one (docs/design.md §16.1), and
    ``compacts_through_seq`` only on a compaction summary (§16.3), renumbered: how many of the
    session's messages already ``exported`` (their seqs, ascending) it stands for."""
    message = {
        "role": row["role"],
        "source": row["source"],
        "content": row["content"],
        "metadata": row["metadata"],
        "created_at": _isoformat(row["created_at"]),
    }
    if row["usage"] is not None:
        message["usage"] = row["usage"]
    if row["compacts_through_seq"] is not None:
        message["compacts_through_seq"] = bisect_right(exported, row["compacts_through_seq"])
    exported.append(row["seq"])
    return message


def _message_pages(
    session_pk: uuid.UUID, chunk_size: int, using: str
) -> Iterator[list[dict[str, Any]]]:
    last_seq = 0
    exported = array("q")  # the seqs written so far (8 bytes each), for the renumbering
    while True:
        rows = list(
            Message.objects.using(using)
            .filter(session_id=session_pk, seq__gt=last_seq)
            .order_by("seq")
            .values(
                "seq",
                "role",
                "source",
                "content",
                "metadata",
                "created_at",
                "usage",
                "compacts_through_seq",
            )[:chunk_size]
        )
        if rows:
            yield [_exported_message(row, exported) for row in rows]
        if len(rows) < chunk_size:
            return
        last_seq = cast(int, rows[-1]["seq"])  # messages of a session always have one


def export_conversations(
    *,
    scope: Scope | str,
    agent_id: str | None = None,
    exact: bool = False,
    ensure_ascii: bool = False,
    chunk_size: int = EXPORT_SESSION_CHUNK,
    message_chunk_size: int = EXPORT_MESSAGE_CHUNK,
) -> Iterator[str]:
    """The sessions at ``scope`` as a conversation file (JSON Lines), in pieces of text.

    Joined, the pieces are the file: one line per session, ``{"id", "title", "metadata", "cwd",
    "messages"}``, where ``id`` is the external id the session was imported under, else the
    session's own id. Sessions come in id order (creation order: ids are UUIDv7), messages in
    ``seq`` order. Both are read by keyset pagination in chunks and a session's messages are
    written as they are read, so memory stays bounded for any number of sessions and any
    session length. The export is not a snapshot: rows written while it runs may or may not
    appear. Messages without a session (legacy rows, docs/design.md §4) are not exported.

    Args:
        scope: sessions at this scope and beneath it (only at it with ``exact``).
        agent_id: only this agent's sessions.
        exact: only sessions stored at ``scope`` itself.
        ensure_ascii: escape every non-ASCII character (for outputs that cannot take UTF-8).
        chunk_size: sessions per query.
        message_chunk_size: messages per query.

    Yields:
        Text to write, in order; every line ends with ``\n``.

    Raises:
        NoScope, InvalidScope: ``scope`` is missing or malformed (raised on first iteration).
    """
    using = routing.db_for_read(Session, scope=scope)  # one database for the whole export
    sessions = Session.objects.using(using).within(scope, exact=exact)
    if agent_id is not None:
        sessions = sessions.filter(agent_id=agent_id)
    last_pk: uuid.UUID | None = None
    while True:
        page = sessions if last_pk is None else sessions.filter(pk__gt=last_pk)
        rows = list(
            page.order_by("pk").values(
                "pk",
                "title",
                "metadata",
                "cwd",
                "import_record__external_id",
                "archived_at",
                "forked_from",
                "forked_at_seq",
                "expires_at",
            )[:chunk_size]
        )
        for row in rows:
            head = {
                "id": row["import_record__external_id"] or str(row["pk"]),
                "title": row["title"],
                "metadata": row["metadata"],
                "cwd": row["cwd"],
            }
            if row["archived_at"] is not None:
                head["archived_at"] = _isoformat(row["archived_at"])
            if row["expires_at"] is not None:
                head["expires_at"] = _isoformat(row["expires_at"])
            if row["forked_from"] is not None:
                head["forked_from"] = str(row["forked_from"])
                head["forked_at_seq"] = row["forked_at_seq"]
            yield _dumps(head, ensure_ascii)[:-1] + ',"messages":['
            separator = ""
            for messages in _message_pages(row["pk"], message_chunk_size, using):
                yield separator + ",".join(_dumps(message, ensure_ascii) for message in messages)
                separator = ","
            yield "]}\n"
        if len(rows) < chunk_size:
            return
        last_pk = rows[-1]["pk"]
