"""Ranking and shaping of reference candidates for the mention picker (docs/design.md §8.4).

The database layer filters (scope, not the current session, case-insensitive substring of id,
cwd or title) and should order in SQL with the same rule as :func:`candidate_rank` and
:func:`rank_candidates` — ``Case(When(cwd=current, then 0), When(Q(cwd__isnull=True) |
Q(cwd=""), then 1), default 2)``, then ``-created_at``, then ``-id`` — before slicing to
``CANDIDATE_LIMIT``. This module is the reference for that order and builds the response dicts.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from .mentions import format_mention

__all__ = [
    "CandidateRow",
    "build_candidate",
    "candidate_label",
    "candidate_rank",
    "epoch_ms",
    "rank_candidates",
]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_MS = timedelta(milliseconds=1)


@dataclass(frozen=True, slots=True)
class CandidateRow:
    """The session fields a candidate is made of.

    Attributes:
        session_id: the session's id as a string.
        title: its title (``""`` when untitled).
        cwd: its working directory, or ``None``.
        created_at: its creation time (aware; a naive value is taken as UTC).
    """

    session_id: str
    title: str
    cwd: str | None
    created_at: datetime


def candidate_rank(cwd: str | None, current_cwd: str | None) -> int:
    """Rank of a candidate's cwd: ``0`` same cwd as the current session, ``1`` no cwd, ``2``
    another cwd (docs/design.md §8.4). An empty cwd counts as none and never matches."""
    if not cwd:
        return 1
    return 0 if cwd == current_cwd else 2


def epoch_ms(moment: datetime) -> int:
    """``moment`` in whole Unix epoch milliseconds (floored; naive values are taken as UTC)."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return (moment - _EPOCH) // _ONE_MS


def rank_candidates(rows: Iterable[CandidateRow], *, current_cwd: str | None) -> list[CandidateRow]:
    """Order candidates as docs/design.md §8.4 says.

    Args:
        rows: candidate sessions (already filtered).
        current_cwd: the current session's cwd, or ``None``.

    Returns:
        The rows by :func:`candidate_rank`, then most recent ``created_at`` first, then
        descending ``session_id`` (so the order is total and stable).
    """
    ordered = sorted(rows, key=lambda row: row.session_id, reverse=True)
    ordered.sort(key=lambda row: epoch_ms(row.created_at), reverse=True)
    ordered.sort(key=lambda row: candidate_rank(row.cwd, current_cwd))
    return ordered


def candidate_label(row: CandidateRow) -> str:
    """The candidate's label: its title, or its id when the title is blank (docs/design.md §8.4)."""
    return row.title if row.title.strip() else row.session_id


def build_candidate(row: CandidateRow, *, current_cwd: str | None) -> dict[str, Any]:
    """One candidate as the API returns it (docs/design.md §8.4).

    Returns:
        ``{"session_id": str, "label": str, "cwd": str | None, "created_at": int (Unix epoch
        ms), "same_workspace": bool, "mention": format_mention(label, session_id)}``.

    Raises:
        InvalidReference: the id cannot be encoded as a session URI (empty, lone surrogate).
    """
    label = candidate_label(row)
    return {
        "session_id": row.session_id,
        "label": label,
        "cwd": row.cwd,
        "created_at": epoch_ms(row.created_at),
        "same_workspace": candidate_rank(row.cwd, current_cwd) == 0,
        "mention": format_mention(label, row.session_id),
    }
