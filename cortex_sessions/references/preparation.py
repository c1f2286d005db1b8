"""The pure steps of preparing a referencing message (docs/design.md §8.3, §8.9).

The service layer reads the referenced sessions; everything that needs no database lives here:
checking the configuration, normalizing the reference inputs, making mention tokens readable,
and checking for cancellation between steps.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..conf import HARD_MAX_REFERENCES
from .errors import (
    InvalidReference,
    InvalidReferenceConfig,
    ReferenceCancelled,
    SelfReference,
    TooManyReferences,
)
from .mentions import parse_references
from .retention import validate_max_reference_bytes
from .types import CancelToken, Deadline, SessionReferenceInput

__all__ = [
    "check_cancelled",
    "normalize_inputs",
    "readable_content",
    "validate_max_reference_bytes",
    "validate_max_references",
]


def validate_max_references(value: object) -> int:
    """Check a ``MAX_REFERENCES`` value and return it (docs/design.md §8.3).

    Raises:
        InvalidReferenceConfig: ``value`` is not an ``int`` from 1 to 3 (``bool`` refused).
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidReferenceConfig(
            f"MAX_REFERENCES must be an integer from 1 to {HARD_MAX_REFERENCES}: {value!r}."
        )
    if not 1 <= value <= HARD_MAX_REFERENCES:
        raise InvalidReferenceConfig(
            f"MAX_REFERENCES must be an integer from 1 to {HARD_MAX_REFERENCES}: {value!r}."
        )
    return value


def normalize_inputs(
    inputs: Iterable[SessionReferenceInput],
    *,
    current_session_id: object,
    max_references: int,
) -> list[tuple[int, SessionReferenceInput]]:
    """Deduplicate and check a message's references (docs/design.md §8.3).

    Checks, in this order: the configuration; every input is a :class:`SessionReferenceInput`;
    none names the message's own session; at most ``max_references`` distinct ids remain.

    Args:
        inputs: the references, explicit ones first and then those parsed from mentions, as the
            service gathers them. Ids are compared as given: the service should canonicalize
            them first (e.g. ``str(uuid.UUID(id))``) if several spellings can name one session.
        current_session_id: the id of the session the message belongs to (compared as
            ``str``).
        max_references: ``MAX_REFERENCES``.

    Returns:
        ``(input_index, reference)`` pairs in input order, one per distinct ``session_id``; the
        first occurrence wins and ``input_index`` is its position in ``inputs``.

    Raises:
        InvalidReferenceConfig: ``max_references`` is not an integer from 1 to 3.
        InvalidReference: an item is not a ``SessionReferenceInput``.
        SelfReference: an item names ``current_session_id``.
        TooManyReferences: more than ``max_references`` distinct ids.
    """
    limit = validate_max_references(max_references)
    items = list(inputs)
    own = str(current_session_id)
    for item in items:
        if not isinstance(item, SessionReferenceInput):
            raise InvalidReference(f"Not a session reference: {item!r}.")
        if item.session_id == own:
            raise SelfReference(session_id=own)
    seen: set[str] = set()
    result: list[tuple[int, SessionReferenceInput]] = []
    for index, item in enumerate(items):
        if item.session_id not in seen:
            seen.add(item.session_id)
            result.append((index, item))
    if len(result) > limit:
        raise TooManyReferences(
            f"The message references {len(result)} sessions; at most {limit} are allowed.",
            count=len(result),
            limit=limit,
        )
    return result


def check_cancelled(
    *,
    cancel_token: CancelToken | None = None,
    deadline: Deadline | None = None,
    now: float | None = None,
) -> None:
    """Raise if preparation should stop (docs/design.md §8.9). Call it between steps and read chunks.

    Args:
        cancel_token: a token the caller may cancel from another thread.
        deadline: a monotonic-clock deadline.
        now: the monotonic clock reading to compare with (default: ``time.monotonic()``).

    Raises:
        ReferenceCancelled: the token was cancelled or the deadline has passed.
    """
    if cancel_token is not None and cancel_token.cancelled:
        raise ReferenceCancelled("Preparing the session references was cancelled.")
    if deadline is not None and deadline.expired(now):
        raise ReferenceCancelled("Preparing the session references ran past its deadline.")


def readable_content(
    blocks: Sequence[Mapping[str, Any]],
) -> tuple[list[dict[str, Any]], list[SessionReferenceInput]]:
    """Make the mention tokens of a content list readable and collect their references (§8.2).

    Args:
        blocks: normalized content blocks (see :func:`cortex_sessions.content.normalize_content`).
            Never mutated.

    Returns:
        ``(content, references)``: a deep copy of ``blocks`` in which every text block's
        ``text`` went through :func:`~.mentions.parse_references`, and the references found,
        block by block in order of appearance (duplicates kept; :func:`normalize_inputs` drops
        them).

    Raises:
        InvalidReference: a text block holds a malformed explicit mention.
    """
    content: list[dict[str, Any]] = []
    references: list[SessionReferenceInput] = []
    for block in blocks:
        copied = copy.deepcopy(dict(block))
        if copied.get("type") == "text" and isinstance(copied.get("text"), str):
            parsed = parse_references(copied["text"])
            copied["text"] = parsed.text
            references.extend(parsed.references)
        content.append(copied)
    return content, references
