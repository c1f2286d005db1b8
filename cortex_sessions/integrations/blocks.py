"""The content blocks the runtime integrations write and read (docs/design.md §13.2, §13.3).

Both adapters store one runtime record (an OpenAI Agents SDK item, an ADK event) as one message:
a text block with the record's readable text, when it has any (so ``last_message`` reads
naturally), then one block that keeps the record verbatim — as JSON where it passes the content
rule (docs/design.md §12.4), else as its JSON text, which escapes what PostgreSQL cannot store.
Pure functions: nothing here reads or writes the database or imports an SDK.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..content import MAX_JSON_DEPTH, check_json_value
from ..exceptions import InvalidInput

__all__ = ["find_block", "is_storable", "text_blocks", "verbatim_block"]


def is_storable(value: Any, *, depth: int = 0) -> bool:
    """Whether ``value``, stored ``depth`` levels deep inside a message's content, passes the
    content rule (no NUL, no lone surrogate, not nested too deep; docs/design.md §12.4).

    Args:
        value: parsed JSON (dicts or mappings, lists, strings, numbers, booleans, ``None``).
        depth: how many levels of the content enclose it (``0``: it is the content).

    Returns:
        ``True`` when the content rule accepts it there; never raises.
    """
    try:
        check_json_value(value, field="content", max_depth=MAX_JSON_DEPTH - depth)
    except InvalidInput:
        return False
    return True


def text_blocks(text: str) -> list[dict[str, Any]]:
    """The readable copy of a record: ``[]`` for blank ``text``, else one ``text`` block.

    The copy is storable even when the record is not: NUL characters are removed and lone
    surrogates replaced by ``?``.

    Args:
        text: the record's readable text.

    Returns:
        A list of zero or one content block, to which the caller appends the verbatim block.
    """
    if not text.strip():
        return []
    if not is_storable(text):
        text = text.replace("\x00", "").encode("utf-8", "replace").decode("utf-8")
    return [{"type": "text", "text": text}]


def verbatim_block(
    block_type: str, key: str, value: Any, *, as_json: Callable[[Any], str]
) -> dict[str, Any]:
    """The block keeping ``value`` verbatim: ``{"type": block_type, key: value}`` when it is
    storable inside a block of the content list, else ``{"type": block_type, key + "_json":
    as_json(value)}``.

    Args:
        block_type: the block's ``type`` (e.g. ``"adk_event"``).
        key: the name ``value`` is kept under (e.g. ``"event"``).
        value: the record as JSON-compatible data.
        as_json: turns ``value`` into JSON text; called only when ``value`` is not storable.

    Returns:
        The content block.

    Raises:
        Whatever ``as_json`` raises (e.g. ``InvalidContent`` for data that is not JSON).
    """
    if is_storable(value, depth=2):  # content list > block > value
        return {"type": block_type, key: value}
    return {"type": block_type, f"{key}_json": as_json(value)}


def find_block(content: Any, block_type: str) -> Mapping[str, Any] | None:
    """The first block of ``content`` whose ``type`` is ``block_type``, or ``None``.

    Args:
        content: a message's content (a list of blocks; ``None`` or empty reads as none).
        block_type: the ``type`` sought.

    Returns:
        The block (a mapping), as stored.
    """
    for block in content or ():
        if isinstance(block, Mapping) and block.get("type") == block_type:
            return block
    return None
