"""Viewsets of the API (docs/design.md §7.3). Every view calls :mod:`cortex_sessions.services`.

The viewsets set their permission, pagination, filter and parser classes and their exception
handler explicitly, so a host's global DRF settings (``AllowAny``, no pagination, another error
format) never change this API. Authentication and rendering are the host's.

Not found, out of scope and malformed ids are one case: 404 ``session_not_found`` with the same
body, on every endpoint and method (docs/design.md §7.3).

The package is split by resource: :mod:`.sessions` (:class:`SessionViewSet`: the collection,
one session, its lifecycle), :mod:`.messages`, :mod:`.references` and :mod:`.export` (the viewset's
message, session-reference and export actions, as mixins), :mod:`.erasures`
(:class:`ErasureViewSet`, erasure by scope); the policies every view shares are in
:mod:`cortex_sessions.api.mixins` and the OpenAPI side (errors, shared parameters, the schema
class) in :mod:`cortex_sessions.api.schema`. Every public name is re-exported here.
"""

from __future__ import annotations

from ..mixins import CortexAPIMixin
from ..schema import (
    ARCHIVED_409,
    ID_PARAMETER,
    IN_PROGRESS_409,
    MAX_SEQ,
    SCOPE_PARAMETERS,
    CortexAutoSchema,
    errors,
)
from .erasures import ErasureViewSet
from .export import JSONLinesRenderer
from .messages import MESSAGE_PAGE_PARAMETERS
from .references import CANDIDATE_PARAMETERS, MAX_CANDIDATE_QUERY
from .sessions import SessionViewSet

__all__ = [
    "ARCHIVED_409",
    "CANDIDATE_PARAMETERS",
    "ID_PARAMETER",
    "IN_PROGRESS_409",
    "MAX_CANDIDATE_QUERY",
    "MAX_SEQ",
    "MESSAGE_PAGE_PARAMETERS",
    "SCOPE_PARAMETERS",
    "CortexAPIMixin",
    "CortexAutoSchema",
    "ErasureViewSet",
    "JSONLinesRenderer",
    "SessionViewSet",
    "errors",
]
