"""Value types of the session-reference feature (docs/design.md §8.3-§8.7).

All are immutable; none touches the database. The database layer turns ``Message`` rows into
:class:`SourceMessage` and receives :class:`ReferenceSnapshot` / :class:`PreparedReferencedMessage`.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

from .errors import InvalidReference

__all__ = [
    "CancelToken",
    "Deadline",
    "PreparedReferencedMessage",
    "ReferenceSnapshot",
    "ReferenceStats",
    "SessionReferenceInput",
    "SourceMessage",
]


@dataclass(frozen=True, slots=True)
class SessionReferenceInput:
    """One referenced session, as selected by a host or parsed from a mention (docs/design.md §8.3).

    Attributes:
        session_id: the referenced session's id; authoritative, opaque, non-empty.
        label: display text carried into the snapshot; ``None`` (or ``""``) means "use the id".

    Raises:
        InvalidReference: ``session_id`` is not a non-empty ``str``, or ``label`` is neither a
            ``str`` nor ``None``.
    """

    session_id: str
    label: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.session_id, str) or not self.session_id:
            raise InvalidReference("A session reference needs a non-empty string session_id.")
        if self.label is not None and not isinstance(self.label, str):
            raise InvalidReference("A session reference label must be a string.")

    @property
    def effective_label(self) -> str:
        """The label to show: ``label`` when non-empty, else ``session_id`` (docs/design.md §8.3)."""
        return self.label or self.session_id


@dataclass(frozen=True, slots=True)
class SourceMessage:
    """A stored message of a referenced session, as read from the database (docs/design.md §3.2).

    Attributes:
        seq: the message's per-session sequence number (positive).
        role: ``user`` · ``assistant`` · ``system`` · ``tool``.
        source: ``user`` · ``checkpoint`` · ``session-reference`` · ``host``.
        content: the stored list of content blocks, unmodified.
    """

    seq: int
    role: str
    source: str
    content: list[Any]


@dataclass(frozen=True, slots=True)
class ReferenceStats:
    """What retention did to one referenced session (docs/design.md §8.6).

    Attributes:
        compacted: ``True`` when a message with text was dropped to fit the budget or a text
            was shortened; ``False`` when the snapshot holds the whole surface unchanged.
        original_messages: conversation messages in the surface window — the newest checkpoint
            and every conversation message after it (all conversation messages when there is
            no checkpoint) — counted by role and source only, with or without text.
        retained_messages: entries in the snapshot's ``conversation``.
        omitted_messages: ``original_messages - retained_messages``: window messages absent from
            the snapshot, either dropped whole to fit the budget or without any text (an
            assistant turn that only called tools, say).
        omitted_bytes: UTF-8 bytes of text cut out by shortening: the sum of the ``N`` of every
            ``[… omitted N UTF-8 bytes …]`` marker. Text of messages dropped whole is not
            counted (it is never read).
        truncated: ``True`` when at least one text was shortened.
    """

    compacted: bool
    original_messages: int
    retained_messages: int
    omitted_messages: int
    omitted_bytes: int
    truncated: bool

    def as_dict(self) -> dict[str, Any]:
        """The stats as a plain dict, keys in field order."""
        return {
            "compacted": self.compacted,
            "original_messages": self.original_messages,
            "retained_messages": self.retained_messages,
            "omitted_messages": self.omitted_messages,
            "omitted_bytes": self.omitted_bytes,
            "truncated": self.truncated,
        }


@dataclass(frozen=True, slots=True)
class ReferenceSnapshot:
    """A byte-budgeted, read-only snapshot of one referenced session (docs/design.md §8.5-§8.6).

    Attributes:
        session_id: the referenced session's id.
        label: the effective label (the id when none was given).
        cwd: the referenced session's working directory, or ``None``.
        captured_through_seq: seq of the newest message of the source session when it was read
            (any role or source); ``0`` for a session without messages.
        conversation: the retained surface, oldest first, as ``{"role", "text"}`` dicts.
        stats: what retention did.
        retained_seqs: the seq of each ``conversation`` entry, in the same order (not part of
            the serialized snapshot).
    """

    session_id: str
    label: str
    cwd: str | None
    captured_through_seq: int
    conversation: list[dict[str, str]]
    stats: ReferenceStats
    retained_seqs: tuple[int, ...] = ()

    def as_json(self) -> dict[str, Any]:
        """The snapshot object that is serialized, measured against the budget and rendered:
        ``{"session_id", "label", "cwd", "captured_through_seq", "conversation"}`` in that order
        (docs/design.md §8.6)."""
        return {
            "session_id": self.session_id,
            "label": self.label,
            "cwd": self.cwd,
            "captured_through_seq": self.captured_through_seq,
            "conversation": [dict(entry) for entry in self.conversation],
        }


@dataclass(frozen=True, slots=True)
class PreparedReferencedMessage:
    """A user message made ready to send with its references (docs/design.md §8.7).

    Attributes:
        content: the message's content blocks, copied, with mention tokens made readable.
        contexts: ``[]`` without references; otherwise exactly one aggregated context dict
            ``{"role": "user", "source": {...}, "content": [{"type": "text", "text": ...}]}``.
    """

    content: list[dict[str, Any]]
    contexts: list[dict[str, Any]]

    def as_dict(self) -> dict[str, Any]:
        """``{"content": [...], "contexts": [...]}``, the body of the prepare endpoint (§8.8)."""
        return {"content": self.content, "contexts": self.contexts}


class CancelToken:
    """A thread-safe flag a caller sets to abandon a preparation (docs/design.md §8.9, ``CANCELLED``).

    ``cancel()`` may be called from any thread; preparation checks ``cancelled`` between
    steps and raises :class:`~cortex_sessions.references.errors.ReferenceCancelled`.
    """

    __slots__ = ("_event",)

    def __init__(self) -> None:
        self._event = threading.Event()

    def cancel(self) -> None:
        """Ask the preparation using this token to stop. Idempotent."""
        self._event.set()

    @property
    def cancelled(self) -> bool:
        """Whether :meth:`cancel` has been called."""
        return self._event.is_set()

    def __repr__(self) -> str:
        return f"CancelToken(cancelled={self.cancelled})"


@dataclass(frozen=True, slots=True)
class Deadline:
    """A point in ``time.monotonic()`` seconds after which preparation gives up (docs/design.md §8.9).

    Attributes:
        at: the monotonic clock reading (seconds) at which the deadline passes.
    """

    at: float

    @classmethod
    def in_seconds(cls, seconds: float) -> Deadline:
        """A deadline ``seconds`` (a non-negative number) from now on the monotonic clock."""
        return cls(time.monotonic() + seconds)

    def expired(self, now: float | None = None) -> bool:
        """Whether the deadline has passed at ``now`` (monotonic seconds; default: the clock)."""
        return (time.monotonic() if now is None else now) >= self.at

    def remaining(self, now: float | None = None) -> float:
        """Seconds left before the deadline (negative once passed)."""
        return self.at - (time.monotonic() if now is None else now)
