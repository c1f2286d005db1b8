"""Token counts of messages (docs/design.md §16.2).

Every message gets an app-owned ``token_count``: the tokens its content takes in a model's
context, from the setting ``TOKEN_COUNTER`` (a dotted path to a callable ``(role, content) ->
int``; ``content`` is the list of content blocks as stored). The default,
:func:`estimate_tokens`, needs no dependency and no download: the UTF-8 bytes of the text
blocks divided by four, rounded up, plus :data:`MESSAGE_OVERHEAD_TOKENS` for the role and
the message's framing. Its error against a real tokenizer on real text is in
docs/context-window.md ("Token counts").
"""

from __future__ import annotations

import logging
from typing import Any

from .conf import app_settings
from .exceptions import InvalidInput, TokenCountError

logger = logging.getLogger("cortex_sessions")

__all__ = ["BYTES_PER_TOKEN", "MESSAGE_OVERHEAD_TOKENS", "count_tokens", "estimate_tokens"]

#: UTF-8 bytes per token the default estimate assumes (English prose with a BPE tokenizer of
#: the GPT-4 family averages about four characters a token).
BYTES_PER_TOKEN = 4
#: Tokens every message costs besides its text: the role and the chat format's delimiters
#: (OpenAI's cookbook counts 3 to 4 a message for its chat models).
MESSAGE_OVERHEAD_TOKENS = 4
#: Largest ``token_count`` a message may have (the column is a positive 32-bit integer).
MAX_TOKEN_COUNT = 2**31 - 1


def estimate_tokens(role: str, content: Any) -> int:
    """The default ``TOKEN_COUNTER``: an estimate of the tokens a message takes, with no
    dependency (docs/design.md §16.2).

    Args:
        role: the message's role (not used: every role costs the same overhead).
        content: the message's content blocks as stored (a list of dicts); the text of each
            ``{"type": "text", "text": ...}`` block counts, other blocks do not.

    Returns:
        ``ceil(UTF-8 bytes of the text blocks / 4) + 4`` (an int ``>= 4``).
    """
    size = 0
    if isinstance(content, list):
        for block in content:
            if isinstance(block, dict) and block.get("type") == "text":
                text = block.get("text")
                if isinstance(text, str):
                    size += len(text.encode("utf-8", "surrogatepass"))
    return -(-size // BYTES_PER_TOKEN) + MESSAGE_OVERHEAD_TOKENS


def count_tokens(role: str, content: Any) -> int:
    """The ``token_count`` of a message: ``TOKEN_COUNTER(role, content)`` (docs/design.md
    §16.2).

    Args:
        role: the message's role.
        content: its content blocks, as stored.

    Returns:
        The count, an int from 0 to 2**31 - 1.

    Raises:
        InvalidInput: the counter returned something else than such an int (code
            ``invalid``, field ``content``): nothing is written.
        TokenCountError: the counter raised (any ``Exception``); chained to it and logged
            with its traceback on the ``cortex_sessions`` logger. Every write counts before
            it writes, so nothing is written (the API answers 503 ``token_counter_failed``).
    """
    counter = app_settings.TOKEN_COUNTER
    try:
        count = counter(role, content)
    except Exception as exc:  # the host's counter: whatever it raises refuses the write
        logger.error("TOKEN_COUNTER raised counting a %s message: %r", role, exc, exc_info=exc)
        raise TokenCountError(
            f"TOKEN_COUNTER raised {type(exc).__name__} counting a {role} message; nothing "
            "was written. Retry later.",
            role=role,
            error=type(exc).__name__,
        ) from exc
    if type(count) is not int or not 0 <= count <= MAX_TOKEN_COUNT:
        raise InvalidInput(
            f"TOKEN_COUNTER returned {count!r} for a {role} message; it must return an int "
            f"from 0 to {MAX_TOKEN_COUNT}.",
            field="content",
        )
    return count
