"""Errors of the session-reference feature, each with a stable ``code`` (docs/design.md §8.9).

The codes are the verbatim strings of docs/design.md §8.9; host adapters branch on
them, never on the message text. ``http_status`` is the status the API layer answers with; the
core itself never speaks HTTP.
"""

from __future__ import annotations

from ..exceptions import CortexSessionsError

__all__ = [
    "InvalidReference",
    "InvalidReferenceConfig",
    "ReferenceBudgetExceeded",
    "ReferenceCancelled",
    "ReferenceReadFailed",
    "SelfReference",
    "SessionReferenceError",
    "TooManyReferences",
]


class SessionReferenceError(CortexSessionsError):
    """Base class of every session-reference failure (docs/design.md §8.9).

    Attributes:
        code: one of the seven ``SESSION_REFERENCE_*`` strings (on the subclasses).
        http_status: the HTTP status the API layer maps the error to.
    """

    code = "SESSION_REFERENCE_ERROR"
    http_status = 500
    default_message = "The session reference could not be prepared."


class InvalidReferenceConfig(SessionReferenceError):
    """``MAX_REFERENCES`` or ``MAX_REFERENCE_BYTES`` is not acceptable (a server fault: 500)."""

    code = "SESSION_REFERENCE_INVALID_CONFIG"
    http_status = 500
    default_message = "The session-reference settings are invalid."


class InvalidReference(SessionReferenceError):
    """A URI, mention or reference input is malformed (docs/design.md §8.1-§8.3)."""

    code = "SESSION_REFERENCE_INVALID_REFERENCE"
    http_status = 400
    default_message = "The session reference is malformed."


class SelfReference(SessionReferenceError):
    """A message references its own session (docs/design.md §8.3)."""

    code = "SESSION_REFERENCE_SELF_REFERENCE"
    http_status = 400
    default_message = "A message cannot reference its own session."


class TooManyReferences(SessionReferenceError):
    """More distinct sessions are referenced than ``MAX_REFERENCES`` allows (docs/design.md §8.3)."""

    code = "SESSION_REFERENCE_TOO_MANY"
    http_status = 400
    default_message = "The message references too many sessions."


class ReferenceReadFailed(SessionReferenceError):
    """A referenced session is missing or outside the caller's scope — deliberately the same
    error for both (docs/design.md §8.8)."""

    code = "SESSION_REFERENCE_READ_FAILED"
    http_status = 404
    default_message = "A referenced session could not be read."


class ReferenceBudgetExceeded(SessionReferenceError):
    """A snapshot cannot fit ``MAX_REFERENCE_BYTES`` even when compacted (docs/design.md §8.6)."""

    code = "SESSION_REFERENCE_BUDGET_EXCEEDED"
    http_status = 413
    default_message = "A referenced session does not fit the reference byte budget."


class ReferenceCancelled(SessionReferenceError):
    """Preparation was cancelled by a cancel token or ran past its deadline (docs/design.md §8.9)."""

    code = "SESSION_REFERENCE_CANCELLED"
    http_status = 503
    default_message = "Preparing the session references was cancelled."
