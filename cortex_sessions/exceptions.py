"""The app's own exceptions, each with a stable ``code``.

Clients branch on ``code``, never on the message text. The core never maps these to HTTP: the API
layer (``cortex_sessions.api``) does, so the core stays free of DRF (docs/design.md §7.1, §7.3).
"""

from __future__ import annotations

import math
from typing import Any

__all__ = [
    "ContextBudgetExceeded",
    "CortexSessionsError",
    "DefaultConflict",
    "EmptyContent",
    "ErasureNotFound",
    "IdempotencyKeyInProgress",
    "IdempotencyKeyReused",
    "InvalidAgentId",
    "InvalidContent",
    "InvalidConversation",
    "InvalidFilter",
    "InvalidIdempotencyKey",
    "InvalidInput",
    "InvalidMetadata",
    "InvalidRole",
    "InvalidScope",
    "InvalidSource",
    "InvalidText",
    "InvalidThroughSeq",
    "InvalidUpToSeq",
    "InvalidUsage",
    "LegalHold",
    "MessageNotFound",
    "MessageTooLarge",
    "NoScope",
    "NulCharacter",
    "ScopeError",
    "ScopeForbidden",
    "SearchTimeout",
    "SessionArchived",
    "SessionNotFound",
    "SummaryTooLarge",
    "TokenCountError",
    "TooManyKeys",
    "TooManyMessages",
    "UsageTotalOverflow",
    "ValueTooLong",
    "WriteOutcomeUnknown",
]


class CortexSessionsError(Exception):
    """Base class of every error the app raises on purpose.

    Attributes:
        code: stable, machine-readable identifier (``snake_case``) of the failure.
        message: human-readable explanation; may change between releases.
        params: extra structured details (for example ``{"field": "title"}``).
        api_params: the names of the ``params`` the API puts in the error body's ``params``
            object, for a client to act on (none unless a class names them).
    """

    code: str = "error"
    default_message: str = "The request could not be completed."
    api_params: tuple[str, ...] = ()

    def __init__(self, message: str | None = None, **params: Any) -> None:
        self.message = message or self.default_message
        self.params = params
        super().__init__(self.message)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code!r}, message={self.message!r})"


# -- scopes (docs/design.md §2) ---------------------------------------------------------------------------


class ScopeError(CortexSessionsError):
    """A scope could not be used."""

    code = "scope_error"


class NoScope(ScopeError):
    """No scope, or an empty one, was given where one is required (docs/design.md §2.4)."""

    code = "no_scope"
    default_message = "A scope is required; an empty or missing scope never means 'match all'."


class InvalidScope(ScopeError):
    """A scope string or level breaks the rules of docs/design.md §2.1–2.2."""

    code = "invalid_scope"
    default_message = "The scope is not valid."


class ScopeForbidden(ScopeError):
    """A request tried to narrow to a scope that is not at or beneath its own (docs/design.md §2.5)."""

    code = "scope_forbidden"
    default_message = "The requested scope is outside the scope this request may use."


# -- lookups --------------------------------------------------------------------------------------


class SessionNotFound(CortexSessionsError):
    """The session does not exist, lies outside the caller's scope, or belongs to another agent.

    The three cases are deliberately indistinguishable (docs/design.md §6.1, §7.3).
    """

    code = "session_not_found"
    default_message = "Session not found."


class ErasureNotFound(CortexSessionsError):
    """No erasure record has this id (docs/design.md §18.2); the API answers 404."""

    code = "erasure_not_found"
    default_message = "Erasure not found."


class MessageNotFound(CortexSessionsError):
    """The message does not exist in the session."""

    code = "message_not_found"
    default_message = "Message not found."


class DefaultConflict(CortexSessionsError):
    """Another session already is the default for this agent and scope (docs/design.md §6)."""

    code = "default_conflict"
    default_message = "Another session is already the default for this agent and scope."


class SessionArchived(CortexSessionsError):
    """The session is archived, so it is read-only: appends, message deletes and make-default
    are refused until it is unarchived (docs/design.md §11.2)."""

    code = "session_archived"
    default_message = "The session is archived; unarchive it to change its messages."


class LegalHold(CortexSessionsError):
    """The session is on legal hold: no path deletes it, and its messages are frozen — message
    deletes, clear, undo and pop are refused too (docs/design.md §18.1). Appends, reads,
    archive and edits of its host-owned fields are not."""

    code = "legal_hold"
    default_message = "The session is on legal hold; it and its messages cannot be deleted."


# -- bad input ------------------------------------------------------------------------------------


class InvalidInput(CortexSessionsError):
    """Input that fails validation. ``field`` names the offending input field, when there is one."""

    code = "invalid"
    default_message = "Invalid input."

    def __init__(self, message: str | None = None, *, field: str | None = None, **params: Any):
        super().__init__(message, field=field, **params)
        self.field = field


class InvalidAgentId(InvalidInput):
    code = "invalid_agent_id"
    default_message = "agent_id must be 1 to 255 characters without control characters."


class InvalidMetadata(InvalidInput):
    code = "invalid_metadata"
    default_message = "metadata must be a JSON object."


class InvalidRole(InvalidInput):
    code = "invalid_role"
    default_message = "Unknown message role."


class InvalidSource(InvalidInput):
    code = "invalid_source"
    default_message = "Unknown message source."


class InvalidContent(InvalidInput):
    code = "invalid_content"
    default_message = "content must be a string or a list of content blocks."


class EmptyContent(InvalidInput):
    code = "empty_content"
    default_message = "A message needs non-empty content."


class MessageTooLarge(InvalidInput):
    code = "message_too_large"
    default_message = "The message is larger than MAX_MESSAGE_BYTES."


class NulCharacter(InvalidInput):
    code = "nul_character"
    default_message = "Text may not contain NUL (\\u0000) characters."


class InvalidText(InvalidInput):
    code = "invalid_text"
    default_message = "Text must be valid Unicode (no lone surrogate characters)."


class ValueTooLong(InvalidInput):
    code = "too_long"
    default_message = "The value is too long."


class TooManyMessages(InvalidInput):
    """One append carries more messages than ``MAX_MESSAGES_PER_APPEND``: the append would
    hold the session's row lock for as long as it takes to write them all (docs/design.md
    §12.6). Nothing is written; send the messages in several appends."""

    code = "too_many_messages"
    default_message = "The append carries more messages than MAX_MESSAGES_PER_APPEND."


class TooManyKeys(InvalidInput):
    """A JSON object the app would store (``metadata``, a content block, an ADK state) has
    more keys than ``MAX_JSON_KEYS`` (docs/design.md §12.6). Nothing is written."""

    code = "too_many_keys"
    default_message = "A JSON object has more keys than MAX_JSON_KEYS."


class InvalidConversation(InvalidInput):
    """A line of a conversation file (JSON Lines) is not a conversation (``transfer``)."""

    code = "invalid_conversation"
    default_message = "The line is not a conversation object."


class InvalidFilter(InvalidInput):
    """A list filter, ordering or page bound is not acceptable (docs/design.md §7.2)."""

    code = "invalid_filter"
    default_message = "Invalid list filter."


class InvalidUpToSeq(InvalidInput):
    """A fork point that is not an integer from 0 to the source's last ``seq``
    (docs/design.md §11.1)."""

    code = "invalid_up_to_seq"
    default_message = "up_to_seq must be an integer from 0 to the session's last seq."


class InvalidUsage(InvalidInput):
    """A message's ``usage`` that is not null or an object of the known keys with good values
    (docs/design.md §16.1)."""

    code = "invalid_usage"
    default_message = (
        "usage must be null or an object of input_tokens, output_tokens, cached_input_tokens, "
        "reasoning_tokens (non-negative integers), model (a string of at most 255 characters) "
        "and cost (a non-negative decimal as a JSON string, at most 6 fractional digits)."
    )


class UsageTotalOverflow(InvalidUsage):
    """A write whose messages' ``usage`` is valid one by one but would take a session's usage
    totals past what they hold: ``cost`` (``numeric(20, 6)``) to 10^14 or more (on SQLite,
    whose column keeps 15 significant digits, to 99999999999999.9 or more), or
    ``input_tokens``, ``output_tokens`` or ``context_tokens`` past 2^63 - 1 (docs/design.md
    §16.1). Nothing is written; the API answers 400. ``params`` carry ``field`` and, when the
    database did not hide it, ``total`` (the total's name) and ``limit``."""

    code = "usage_total_overflow"
    default_message = (
        "The append would take the session's usage totals past what they hold (cost below "
        "10^14, token totals at most 2^63 - 1); nothing was written. Append to another session."
    )


# -- idempotency (docs/design.md §12.1) ------------------------------------------------------------


class InvalidIdempotencyKey(InvalidInput):
    """An ``Idempotency-Key`` that is not 1–255 visible ASCII characters other than the comma
    (two headers arrive joined by one)."""

    code = "invalid_idempotency_key"
    default_message = (
        "Idempotency-Key must be 1 to 255 visible ASCII characters, without a comma; send "
        "the header once."
    )


class IdempotencyKeyReused(CortexSessionsError):
    """The key was already used, within ``IDEMPOTENCY_TTL``, for a call with another input.

    The API answers 422; nothing is written.
    """

    code = "idempotency_key_reused"
    default_message = "This Idempotency-Key was already used with a different request."


class IdempotencyKeyInProgress(CortexSessionsError):
    """A call with the same key is still running and did not end within the database's lock
    wait timeout (PostgreSQL ``lock_timeout``, InnoDB ``innodb_lock_wait_timeout``).

    The API answers 409; nothing is written. Send the same request again later: it replays the
    first call's answer once that call has committed.
    """

    code = "idempotency_key_in_progress"
    default_message = (
        "A request with this Idempotency-Key is still being processed; send it again later to "
        "receive its answer."
    )


# -- database faults (docs/design.md §12.3) ---------------------------------------------------------


class WriteOutcomeUnknown(CortexSessionsError):
    """The connection failed while the write's transaction was being committed (the COMMIT, or
    Django restoring autocommit right after it), so the write may or may not be stored.

    Raised instead of the database error by every service write whose transaction the service
    commits itself (not inside a caller's transaction). The API answers 503 with
    ``Retry-After``. A retry with the same ``Idempotency-Key`` is safe: it replays the write if
    it was stored and runs it if not; without a key, read back before writing again.
    """

    code = "write_outcome_unknown"
    default_message = (
        "The database connection failed while the write was being committed; it may or may not "
        "have been stored. Retry with the same Idempotency-Key (it answers the stored outcome "
        "if there is one), or read back before writing again."
    )


# -- search (docs/design.md §11.5) ----------------------------------------------------------------


class SearchTimeout(CortexSessionsError):
    """A message search statement ran past ``SEARCH_TIMEOUT`` and the database cancelled it
    (:func:`cortex_sessions.search_limits.search_timeout`); nothing is left running and the
    connection stays usable. The API answers 503 ``search_timeout`` with ``Retry-After``.

    Attributes:
        seconds: the ``SEARCH_TIMEOUT`` that was exceeded (also in ``params``).
        retry_after: whole seconds a client is asked to wait before sending the search again
            (the timeout rounded up, at least 1): a client that waits so long keeps at most
            about one search statement running.
    """

    code = "search_timeout"
    default_message = (
        "The search took longer than the server allows and was cancelled; narrow it (fewer "
        "or rarer words, a narrower scope, agent_id) or retry later."
    )

    def __init__(self, message: str | None = None, *, seconds: Any = None, **params: Any):
        if message is None and seconds is not None:
            message = (
                f"The search took longer than SEARCH_TIMEOUT ({seconds} s) and was cancelled; "
                "narrow it (fewer or rarer words, a narrower scope, agent_id) or retry later."
            )
        super().__init__(message, seconds=seconds, **params)
        self.seconds = seconds
        try:
            self.retry_after = max(1, math.ceil(float(seconds)))
        except (TypeError, ValueError, OverflowError):
            self.retry_after = 1


# -- context window (docs/design.md §16.3, §16.4) ---------------------------------------------------


class InvalidThroughSeq(InvalidInput):
    """A compaction's ``through_seq`` that is not an integer from 1 to the session's last
    ``seq``, or not beyond the ``through_seq`` of its newest live compaction
    (docs/design.md §16.3)."""

    code = "invalid_through_seq"
    default_message = (
        "through_seq must be an integer from 1 to the session's last seq, beyond the newest "
        "compaction's through_seq."
    )


class SummaryTooLarge(MessageTooLarge):
    """A compaction's summary that is over ``MAX_MESSAGE_BYTES`` as a message's JSON
    (docs/design.md §16.3). Unlike an appended message (413 ``message_too_large``), the
    API answers 400 ``summary_too_large``: the client chose the summary and must shorten it.
    A ``MessageTooLarge`` too, so callers catching that still catch it; ``params`` carry
    ``size`` and ``limit`` (bytes). Nothing is written."""

    code = "summary_too_large"
    default_message = "The compaction summary is larger than MAX_MESSAGE_BYTES; shorten it."


class TokenCountError(CortexSessionsError):
    """The host's ``TOKEN_COUNTER`` raised while a write counted a message's tokens
    (docs/design.md §16.2): the write is refused and nothing of it is written. Its cause is
    the counter's own exception (``__cause__``), logged on the ``cortex_sessions`` logger.

    A counter that fails (a tokenizer service down, an encoding still downloading) is a server
    fault, maybe transient, not bad input: the API answers 503 ``token_counter_failed`` with
    ``Retry-After``, and the same request may be sent again. ``params`` carry ``role`` and
    ``error`` (the counter's exception type name).

    Attributes:
        retry_after: whole seconds a client is asked to wait before sending the write again.
    """

    code = "token_counter_failed"
    default_message = (
        "The server's TOKEN_COUNTER failed counting a message's tokens; nothing was written. "
        "Retry later."
    )
    retry_after = 1


class ContextBudgetExceeded(CortexSessionsError):
    """The context read's ``max_tokens`` cannot hold the newest compaction summary and the
    newest message after it (docs/design.md §16.4). The API answers 422; ``params`` carry
    ``max_tokens`` and ``required`` (the tokens the smallest context takes)."""

    code = "context_budget_exceeded"
    api_params = ("max_tokens", "required")
    default_message = (
        "max_tokens cannot hold the compaction summary and the newest message; ask for more."
    )
