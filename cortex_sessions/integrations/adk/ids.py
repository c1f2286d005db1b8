"""ADK ids: their length limit and how a session id is read (docs/design.md §13.3).

App names, user ids and session ids are any strings of at most :data:`MAX_ID_CHARS` characters
(the columns' length); a longer one is refused with :class:`AdkIdTooLong` before any query.
"""

from __future__ import annotations

from cortex_sessions.content import check_json_value
from cortex_sessions.exceptions import InvalidInput, ValueTooLong

__all__ = ["MAX_ID_CHARS", "AdkIdTooLong"]

#: Longest app name, user id or session id, in characters (the columns' length).
MAX_ID_CHARS = 255


class AdkIdTooLong(ValueTooLong, ValueError):
    """An app name, user id or session id over :data:`MAX_ID_CHARS` characters.

    Code ``too_long`` (a cortex :class:`~cortex_sessions.exceptions.ValueTooLong`), and a
    ``ValueError``, as ADK raises for bad arguments; ``field`` names the argument.
    """


def _check_id(field: str, value: str | None) -> None:
    if value is not None and len(value) > MAX_ID_CHARS:
        raise AdkIdTooLong(
            f"{field} is {len(value)} characters long; at most {MAX_ID_CHARS} are allowed.",
            field=field,
        )


def _strip(session_id: str | None) -> str | None:
    """A session id as ADK's in-memory store takes it: surrounding whitespace removed."""
    return session_id.strip() if session_id else session_id


def _nameable(session_id: str) -> bool:
    """Whether ``session_id`` could name a stored session: at most :data:`MAX_ID_CHARS`
    characters, without NUL or a lone surrogate, which ``create_session`` refuses. Any other
    id names no session, on every database, without a query (PostgreSQL refuses NUL in a
    query parameter, and a lone surrogate has no UTF-8 form to hash)."""
    if len(session_id) > MAX_ID_CHARS:
        return False
    try:
        check_json_value(session_id, field="session_id")  # the rule every stored string follows
    except InvalidInput:  # NulCharacter, InvalidText
        return False
    return True
