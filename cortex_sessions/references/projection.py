"""The current surface of a referenced session (docs/design.md §8.5).

The surface is the newest ``checkpoint`` message (``role=user``, ``source=checkpoint``) and every
conversation message after it (§3.2) — all conversation messages when there is no checkpoint —
keeping only those whose text (text blocks joined by ``\\n``) is non-empty, each as
``{"role", "text"}``. Tool results, system prompts, host-injected messages and earlier
``session-reference`` contexts never appear.

Two ways in:

- :func:`project_surface` / :func:`split_window` take a whole, in-memory list of messages
  (tests, small sessions).
- The database layer never loads a big session whole. It reads the newest checkpoint, then the
  conversation messages after it *newest first* in chunks, and a count; it hands those to
  :func:`cortex_sessions.references.retention.retain_snapshot`, which pulls lazily and stops as
  soon as nothing more can fit. :func:`surface_message` is the one predicate both paths use.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from ..content import content_text, is_conversation
from .serialization import clean_text
from .types import SourceMessage

__all__ = [
    "SurfaceMessage",
    "SurfaceWindow",
    "is_checkpoint",
    "iter_surface",
    "project_surface",
    "split_window",
    "surface_message",
]


@dataclass(frozen=True, slots=True)
class SurfaceMessage:
    """One message of the surface.

    Attributes:
        seq: the source message's seq.
        role: ``user`` or ``assistant``.
        text: its text (lone surrogates replaced by U+FFFD), never empty.
        is_checkpoint: whether it is the checkpoint the surface starts at.
    """

    seq: int
    role: str
    text: str
    is_checkpoint: bool

    def as_entry(self) -> dict[str, str]:
        """The snapshot's conversation entry: ``{"role": ..., "text": ...}``."""
        return {"role": self.role, "text": self.text}


@dataclass(frozen=True, slots=True)
class SurfaceWindow:
    """The inputs of lazy retention, computed from a whole message list.

    Attributes:
        checkpoint: the newest checkpoint message, or ``None``.
        newest_first: the conversation messages after the checkpoint (all of them when there is
            none), newest first, with or without text.
        window_count: conversation messages in the window, the checkpoint included.
        captured_through_seq: the highest seq of all messages given (any role); ``0`` if none.
    """

    checkpoint: SourceMessage | None
    newest_first: list[SourceMessage]
    window_count: int
    captured_through_seq: int


def is_checkpoint(message: SourceMessage) -> bool:
    """Whether ``message`` is a checkpoint (a compaction summary: ``user`` / ``checkpoint``)."""
    return message.role == "user" and message.source == "checkpoint"


def surface_message(message: SourceMessage, *, checkpoint: bool = False) -> SurfaceMessage | None:
    """The surface form of one message, or ``None`` when it does not belong on a surface.

    Args:
        message: a stored message.
        checkpoint: mark the result as the surface's checkpoint.

    Returns:
        A :class:`SurfaceMessage` for a conversation message (§3.2) whose text is non-empty;
        ``None`` for any other message (tool, system, host, session-reference, or no text).
    """
    if not is_conversation(message.role, message.source):
        return None
    text = content_text(message.content)
    if not text:
        return None
    return SurfaceMessage(message.seq, message.role, clean_text(text), checkpoint)


def split_window(messages: Iterable[SourceMessage]) -> SurfaceWindow:
    """Split a whole message list the way the database layer reads a session.

    Args:
        messages: every message of a session, in any order (sorted by seq here).

    Returns:
        A :class:`SurfaceWindow` for
        :func:`~cortex_sessions.references.retention.retain_snapshot`.
    """
    ordered = sorted(messages, key=lambda message: message.seq)
    captured = ordered[-1].seq if ordered else 0
    start = 0
    checkpoint = None
    for index in range(len(ordered) - 1, -1, -1):
        if is_checkpoint(ordered[index]):
            checkpoint, start = ordered[index], index + 1
            break
    newer = [m for m in ordered[start:] if is_conversation(m.role, m.source)]
    newer.reverse()
    return SurfaceWindow(checkpoint, newer, len(newer) + (checkpoint is not None), captured)


def iter_surface(window: SurfaceWindow) -> Iterator[SurfaceMessage]:
    """The surface of ``window``, oldest first."""
    if window.checkpoint is not None:
        first = surface_message(window.checkpoint, checkpoint=True)
        if first is not None:
            yield first
    for message in reversed(window.newest_first):
        entry = surface_message(message)
        if entry is not None:
            yield entry


def project_surface(messages: Iterable[SourceMessage]) -> list[SurfaceMessage]:
    """The whole current surface of a session, oldest first, without any byte budget (§8.5).

    Args:
        messages: every message of a session, in any order.

    Returns:
        The surface messages; ``[m.as_entry() for m in result]`` is the unbudgeted conversation.
    """
    return list(iter_surface(split_window(messages)))
