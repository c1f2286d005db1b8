"""Serializers of the API (docs/design.md §3, §7.3).

Output serializers render sessions and messages with the field names of docs/design.md §3. Input
serializers check only the *shape* of a request (types, lengths) and describe it in the schema;
the business rules (agent id characters, metadata being an object, content blocks, sizes, NUL
characters) are enforced by :mod:`cortex_sessions.services`, whose errors the exception handler
maps. Input serializers declare only writable fields, so a client sending ``id``, ``scope``,
``message_count``, ``last_message``, ``backfilled_by``, ``is_default``, ``created_at`` or
``updated_at`` changes nothing: those keys are ignored. Any other key the serializer does not
define is 400 ``unknown_field`` naming it, and no field converts a value of another JSON type
(docs/design.md §12.4): use the ``Strict*`` fields and :class:`StrictSerializerMixin` for new
input serializers.

The package is split by resource: :mod:`.fields` (schema patterns, strict and JSON-valued
fields), :mod:`.base` (strict bodies, the empty body, the error body), :mod:`.sessions`,
:mod:`.messages`, :mod:`.references`, :mod:`.usage` and :mod:`.erasures`. Every public name is re-exported here; import from
``cortex_sessions.api.serializers``.
"""

from __future__ import annotations

from .base import *  # noqa: F403
from .base import __all__ as _base_all
from .context import *  # noqa: F403
from .context import __all__ as _context_all
from .erasures import *  # noqa: F403
from .erasures import __all__ as _erasures_all
from .fields import *  # noqa: F403
from .fields import __all__ as _fields_all
from .messages import *  # noqa: F403
from .messages import __all__ as _messages_all
from .references import *  # noqa: F403
from .references import __all__ as _references_all
from .sessions import *  # noqa: F403
from .sessions import __all__ as _sessions_all
from .usage import *  # noqa: F403
from .usage import __all__ as _usage_all

__all__ = (
    _base_all
    + _fields_all
    + _sessions_all
    + _messages_all
    + _references_all
    + _context_all
    + _usage_all
    + _erasures_all
)
