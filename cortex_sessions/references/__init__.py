"""Session references: mention one conversation inside another (docs/design.md §8).

This package holds the pure, database-free part: canonical URIs (§8.1), mentions (§8.2),
input normalization (§8.3), candidate ranking (§8.4), projection (§8.5), byte retention (§8.6)
and rendering (§8.7), plus the stable errors (§8.9). It imports neither DRF nor the models.

The database layer is :mod:`cortex_sessions.references.service` (candidates, preparation from
stored sessions, durable append); import it explicitly — it is not re-exported here, so this
package stays importable before the app registry is ready.
"""

from __future__ import annotations

from .candidates import (
    CandidateRow,
    build_candidate,
    candidate_label,
    candidate_rank,
    epoch_ms,
    rank_candidates,
)
from .errors import (
    InvalidReference,
    InvalidReferenceConfig,
    ReferenceBudgetExceeded,
    ReferenceCancelled,
    ReferenceReadFailed,
    SelfReference,
    SessionReferenceError,
    TooManyReferences,
)
from .mentions import ParsedReferences, format_mention, parse_references
from .preparation import (
    check_cancelled,
    normalize_inputs,
    readable_content,
    validate_max_references,
)
from .projection import (
    SurfaceMessage,
    SurfaceWindow,
    is_checkpoint,
    iter_surface,
    project_surface,
    split_window,
    surface_message,
)
from .rendering import (
    CLOSE_TAG,
    OPEN_TAG,
    PREAMBLE,
    build_prepared_message,
    render_context,
    render_prompt,
)
from .retention import (
    ShortenedText,
    build_snapshot,
    is_cut_point,
    min_shortened_cost,
    omission_marker,
    retain_snapshot,
    shorten_text,
    validate_max_reference_bytes,
)
from .serialization import clean_text, json_text_cost, tag_safe_json, utf8_len
from .types import (
    CancelToken,
    Deadline,
    PreparedReferencedMessage,
    ReferenceSnapshot,
    ReferenceStats,
    SessionReferenceInput,
    SourceMessage,
)
from .uri import SESSION_URI_PREFIX, decode_session_uri, encode_session_uri

__all__ = [
    "CLOSE_TAG",
    "OPEN_TAG",
    "PREAMBLE",
    "SESSION_URI_PREFIX",
    "CancelToken",
    "CandidateRow",
    "Deadline",
    "InvalidReference",
    "InvalidReferenceConfig",
    "ParsedReferences",
    "PreparedReferencedMessage",
    "ReferenceBudgetExceeded",
    "ReferenceCancelled",
    "ReferenceReadFailed",
    "ReferenceSnapshot",
    "ReferenceStats",
    "SelfReference",
    "SessionReferenceError",
    "SessionReferenceInput",
    "ShortenedText",
    "SourceMessage",
    "SurfaceMessage",
    "SurfaceWindow",
    "TooManyReferences",
    "build_candidate",
    "build_prepared_message",
    "build_snapshot",
    "candidate_label",
    "candidate_rank",
    "check_cancelled",
    "clean_text",
    "decode_session_uri",
    "encode_session_uri",
    "epoch_ms",
    "format_mention",
    "is_checkpoint",
    "is_cut_point",
    "iter_surface",
    "json_text_cost",
    "min_shortened_cost",
    "normalize_inputs",
    "omission_marker",
    "parse_references",
    "project_surface",
    "rank_candidates",
    "readable_content",
    "render_context",
    "render_prompt",
    "retain_snapshot",
    "shorten_text",
    "split_window",
    "surface_message",
    "tag_safe_json",
    "utf8_len",
    "validate_max_reference_bytes",
    "validate_max_references",
]
