"""Byte retention of a referenced session's surface (docs/design.md §8.6).

The budget is ``max_bytes`` UTF-8 bytes of ``tag_safe_json(snapshot.as_json())`` — the object
``{session_id, label, cwd, captured_through_seq, conversation}`` serialized exactly as rendering
writes it (:mod:`.serialization`).

How retention decides:

1. The *fixed fields* (the object with an empty ``conversation``) must fit, else
   :class:`~.errors.ReferenceBudgetExceeded`.
2. The *mandatory* messages are the checkpoint (when it has text) and the newest surface
   message. If they fit at full length, older messages are added newest first while they fit;
   the first one that does not fit ends the reading — so messages are dropped oldest first and
   the snapshot is the checkpoint plus a newest suffix. No text is shortened in this case.
3. If the mandatory messages do not fit at full length, every other message is dropped and the
   mandatory texts are shortened, the longest (by JSON cost; on a tie the older) first, each
   only as much as still needed: a head and a tail are kept (about half the allowance each) and
   ``[… omitted N UTF-8 bytes …]`` replaces the middle, ``N`` being the exact UTF-8 length of
   the removed middle. Cuts fall only between user-perceived characters (never inside a code
   point, nor before a combining mark, variation selector, emoji modifier or tag character, nor
   around a zero-width joiner, nor between two regional indicators or CR and LF). At the
   extreme a text becomes the marker alone.
4. If even the mandatory messages at their shortest (the marker alone, or the text itself when
   that is shorter) cannot fit → :class:`~.errors.ReferenceBudgetExceeded`.

The work is linear in what is read: every message is serialized once (its entry's cost), the
total is kept as a running sum (``fixed + Σ entries + commas``), and shortening walks at most
the allowance from each end of a text.

Lazy-reading contract (:func:`retain_snapshot`): ``newest_first`` yields the conversation
messages after the checkpoint, strictly newest first, and is abandoned (not exhausted) as soon
as a message with text does not fit; at most that one message beyond the retained ones is
pulled, plus any messages without text in between.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ..content import is_conversation, is_grapheme_boundary
from .errors import InvalidReferenceConfig, ReferenceBudgetExceeded
from .projection import SurfaceMessage, is_checkpoint, split_window, surface_message
from .serialization import char_json_cost, clean_text, tag_safe_json, utf8_len
from .types import ReferenceSnapshot, ReferenceStats, SourceMessage

__all__ = [
    "ShortenedText",
    "build_snapshot",
    "is_cut_point",
    "min_shortened_cost",
    "omission_marker",
    "retain_snapshot",
    "shorten_text",
    "validate_max_reference_bytes",
]


def omission_marker(omitted_bytes: int) -> str:
    """The marker that replaces a shortened text's middle: ``[… omitted N UTF-8 bytes …]``."""
    return f"[… omitted {omitted_bytes} UTF-8 bytes …]"


def validate_max_reference_bytes(value: object) -> int:
    """Check a ``MAX_REFERENCE_BYTES`` value and return it.

    Raises:
        InvalidReferenceConfig: ``value`` is not a positive ``int`` (``bool`` refused).
    """
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise InvalidReferenceConfig(f"MAX_REFERENCE_BYTES must be a positive integer: {value!r}.")
    return value


#: Whether ``text`` may be cut at ``index`` without splitting a user-perceived character.
is_cut_point = is_grapheme_boundary


@dataclass(frozen=True, slots=True)
class ShortenedText:
    """The result of :func:`shorten_text`.

    Attributes:
        text: ``head + omission_marker(omitted_bytes) + tail``, or the original when it fit.
        omitted_bytes: UTF-8 bytes of the removed middle (``0`` when nothing was removed).
        head: characters kept from the start.
        tail: characters kept from the end.
    """

    text: str
    omitted_bytes: int
    head: int
    tail: int


def min_shortened_cost(text: str, cost: int | None = None) -> int:
    """The smallest JSON cost (bytes inside the quotes) ``text`` can be reduced to: the marker
    alone, or ``text`` itself when that is cheaper. ``cost`` is ``json_text_cost(text)`` if known.
    """
    marker = utf8_len(omission_marker(utf8_len(text)))
    if cost is None:
        cost = utf8_len(tag_safe_json(text)) - 2
    return min(cost, marker)


def shorten_text(text: str, max_cost: int) -> ShortenedText:
    """Shorten ``text`` so it costs at most ``max_cost`` bytes inside a tag-safe JSON string.

    Keeps a head and a tail (the head gets half the room left after the marker, the tail the
    rest) and puts ``[… omitted N UTF-8 bytes …]`` between them, ``N`` exact; cuts only where
    :func:`is_cut_point` allows. Reads at most about ``max_cost`` characters from each end.

    Args:
        text: text without lone surrogates.
        max_cost: the allowance, in UTF-8 bytes of the JSON-escaped text (quotes excluded).

    Returns:
        A :class:`ShortenedText`; ``text`` unchanged when it already fits.

    Raises:
        ValueError: ``max_cost`` is below :func:`min_shortened_cost` (a programming error;
            retention checks it first).
    """
    cost = utf8_len(tag_safe_json(text)) - 2
    if cost <= max_cost:
        return ShortenedText(text, 0, len(text), 0)
    total = utf8_len(text)
    marker_room = utf8_len(omission_marker(total))  # N <= total, so never more digits
    keep = max_cost - marker_room
    if keep < 0:
        raise ValueError(f"Cannot shorten a text to {max_cost} bytes.")
    size = len(text)
    head_room = keep - keep // 2
    head, head_cost = 0, 0
    while head < size:
        step = char_json_cost(text[head])
        if head_cost + step > head_room:
            break
        head_cost += step
        head += 1
    while not is_cut_point(text, head):
        head -= 1
        head_cost -= char_json_cost(text[head])
    tail_room = keep - head_cost
    start, tail_cost = size, 0
    while start > head:
        step = char_json_cost(text[start - 1])
        if tail_cost + step > tail_room:
            break
        tail_cost += step
        start -= 1
    while not is_cut_point(text, start):
        tail_cost -= char_json_cost(text[start])
        start += 1
    omitted = utf8_len(text[head:start])
    shortened = text[:head] + omission_marker(omitted) + text[start:]
    return ShortenedText(shortened, omitted, head, size - start)


@dataclass(slots=True)
class _Entry:
    message: SurfaceMessage
    text: str
    cost: int  # bytes of the serialized {"role","text"} object
    overhead: int  # cost minus the bytes of the text inside its quotes

    @classmethod
    def of(cls, message: SurfaceMessage) -> _Entry:
        cost = utf8_len(tag_safe_json(message.as_entry()))
        overhead = utf8_len(tag_safe_json({"role": message.role, "text": ""}))
        return cls(message, message.text, cost, overhead)

    @property
    def text_cost(self) -> int:
        return self.cost - self.overhead


def retain_snapshot(
    *,
    session_id: str,
    label: str | None,
    cwd: str | None,
    captured_through_seq: int,
    checkpoint: SourceMessage | None,
    newest_first: Iterable[SourceMessage],
    window_count: int,
    max_bytes: int,
) -> ReferenceSnapshot:
    """Build a snapshot within ``max_bytes``, reading ``newest_first`` lazily (docs/design.md §8.5-§8.6).

    This is the entry point of the database layer; see the module docstring for the rules.

    Args:
        session_id: the referenced session's id.
        label: the reference's label; ``None`` or ``""`` means the id.
        cwd: the referenced session's working directory, or ``None``.
        captured_through_seq: the highest seq of the source session at read time (any
            message), ``0`` when it has none; every message passed must be at or below it.
        checkpoint: the newest ``user``/``checkpoint`` message, or ``None`` when there is none.
        newest_first: the conversation messages (§3.2) with seq above the checkpoint's (all of
            them without a checkpoint), in strictly decreasing seq order. Pulled lazily and
            abandoned as soon as a message with text does not fit.
        window_count: the number of conversation messages in the window, the checkpoint
            included — a count by role and source, text not inspected. Clamped up to what was
            actually read, should a concurrent write make it stale.
        max_bytes: the budget, UTF-8 bytes of the serialized snapshot (``MAX_REFERENCE_BYTES``).

    Returns:
        A :class:`ReferenceSnapshot`; ``len(tag_safe_json(result.as_json()).encode()) <=
        max_bytes``.

    Raises:
        InvalidReferenceConfig: ``max_bytes`` is not a positive ``int``.
        ReferenceBudgetExceeded: the fixed fields, or the mandatory messages at their shortest,
            do not fit.
        ValueError: ``checkpoint`` is not a checkpoint, or ``newest_first`` breaks its contract
            (order, seq range, a non-conversation message or a checkpoint) — a bug in the caller.
    """
    budget = validate_max_reference_bytes(max_bytes)
    session_id = clean_text(session_id)
    shown_label = clean_text(label or session_id)
    cwd = clean_text(cwd) if cwd is not None else None
    fixed = utf8_len(
        tag_safe_json(
            {
                "session_id": session_id,
                "label": shown_label,
                "cwd": cwd,
                "captured_through_seq": captured_through_seq,
                "conversation": [],
            }
        )
    )
    if fixed > budget:
        raise ReferenceBudgetExceeded(
            f"The fixed fields of the snapshot of {session_id!r} take {fixed} bytes; "
            f"the budget is {budget}.",
            session_id=session_id,
        )

    if checkpoint is not None and (
        not is_checkpoint(checkpoint) or checkpoint.seq > captured_through_seq
    ):
        raise ValueError(f"{checkpoint} is not a checkpoint within the captured range.")
    floor = checkpoint.seq if checkpoint is not None else 0
    pulled = 0
    last_seq: int | None = None
    source = iter(newest_first)

    def next_surface() -> SurfaceMessage | None:
        """The next message with text, or ``None`` when the iterator is exhausted."""
        nonlocal pulled, last_seq
        for message in source:
            pulled += 1
            if (
                message.seq > captured_through_seq
                or message.seq <= floor
                or (last_seq is not None and message.seq >= last_seq)
                or is_checkpoint(message)
            ):
                raise ValueError(f"newest_first broke its contract at seq {message.seq}.")
            last_seq = message.seq
            if not is_conversation(message.role, message.source):
                raise ValueError(f"newest_first yielded a non-conversation message {message}.")
            entry = surface_message(message)
            if entry is not None:
                return entry
        return None

    first = surface_message(checkpoint, checkpoint=True) if checkpoint is not None else None
    newest = next_surface()
    mandatory = [_Entry.of(m) for m in (first, newest) if m is not None]
    used = fixed + sum(e.cost for e in mandatory) + max(0, len(mandatory) - 1)
    suffix: list[_Entry] = []  # newest first, excluding ``newest``
    dropped = truncated = False
    omitted_bytes = 0

    if used <= budget:
        while (candidate := next_surface()) is not None:
            entry = _Entry.of(candidate)
            if used + entry.cost + 1 > budget:
                dropped = True
                break
            suffix.append(entry)
            used += entry.cost + 1
    else:
        # Every other message is dropped (older ones are not even read: ``compacted`` is
        # already true because a text will be shortened), then the mandatory texts shrink.
        lowest = sum(e.overhead + min_shortened_cost(e.text, e.text_cost) for e in mandatory)
        if fixed + lowest + len(mandatory) - 1 > budget:
            raise ReferenceBudgetExceeded(
                f"The checkpoint and newest message of {session_id!r} cannot fit {budget} bytes "
                "even when shortened.",
                session_id=session_id,
            )
        for entry in sorted(mandatory, key=lambda e: (-e.text_cost, e.message.seq)):
            excess = used - budget
            if excess <= 0:
                break
            allowance = max(entry.text_cost - excess, min_shortened_cost(entry.text))
            result = shorten_text(entry.text, allowance)
            if result.omitted_bytes == 0:
                continue
            new_cost = entry.overhead + utf8_len(tag_safe_json(result.text)) - 2
            used -= entry.cost - new_cost
            entry.text, entry.cost = result.text, new_cost
            omitted_bytes += result.omitted_bytes
            truncated = True

    retained = mandatory[:1] if first is not None else []
    retained += reversed(suffix)
    if newest is not None:
        retained.append(mandatory[-1])
    original = max(window_count, pulled + (checkpoint is not None))
    stats = ReferenceStats(
        compacted=dropped or truncated,
        original_messages=original,
        retained_messages=len(retained),
        omitted_messages=original - len(retained),
        omitted_bytes=omitted_bytes,
        truncated=truncated,
    )
    return ReferenceSnapshot(
        session_id=session_id,
        label=shown_label,
        cwd=cwd,
        captured_through_seq=captured_through_seq,
        conversation=[{"role": e.message.role, "text": e.text} for e in retained],
        stats=stats,
        retained_seqs=tuple(e.message.seq for e in retained),
    )


def build_snapshot(
    messages: Iterable[SourceMessage],
    *,
    session_id: str,
    label: str | None = None,
    cwd: str | None = None,
    max_bytes: int,
) -> ReferenceSnapshot:
    """Project and retain a whole, in-memory message list (docs/design.md §8.5-§8.6).

    Same result as the database path: it splits the list with
    :func:`~.projection.split_window` and calls :func:`retain_snapshot`.

    Args:
        messages: every message of the referenced session, any order.
        session_id, label, cwd, max_bytes: as for :func:`retain_snapshot`.

    Returns:
        A :class:`ReferenceSnapshot` whose ``captured_through_seq`` is the highest seq given.

    Raises:
        InvalidReferenceConfig, ReferenceBudgetExceeded: as for :func:`retain_snapshot`.
    """
    window = split_window(messages)
    return retain_snapshot(
        session_id=session_id,
        label=label,
        cwd=cwd,
        captured_through_seq=window.captured_through_seq,
        checkpoint=window.checkpoint,
        newest_first=window.newest_first,
        window_count=window.window_count,
        max_bytes=max_bytes,
    )
