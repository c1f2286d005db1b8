"""The API's keyed append of one message in one statement on PostgreSQL (docs/design.md §12.1,
§14): ``POST /sessions/{id}/messages/`` with an ``Idempotency-Key`` and one plain message (no
session references) appends it and records the key in the append's own statement
(:func:`cortex_sessions.services.keyed_append.append_recorded`), instead of
:func:`~cortex_sessions.services.idempotency.run_once`'s read, claim, append, record, BEGIN
and COMMIT. Everything else, and a request whose key's row exists, goes through ``run_once``
as before; a replay of a row recorded here rebuilds the first answer byte for byte.

The key's endpoint is the API's (``api:POST <path>``, the session's id canonical), whichever
path records it: an API key and a service key (``append_messages(idempotency_key=…)``,
endpoint ``service:append_messages:<id>``) never meet, even when their text is the same.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rest_framework import status
from rest_framework.request import Request

from cortex_sessions import services
from cortex_sessions.services.keyed_append import KeyedCall, append_recorded, replay_recorded

from .idempotency import OneStatement
from .serializers import MessageWithReferencesInputSerializer

__all__ = ["ONE_MESSAGE", "message_input"]


def message_input(item: Mapping[str, Any]) -> services.MessageInput:
    """The service's input of one validated message of an append's body.

    Args:
        item: ``validated_data`` of ``MessageInputSerializer`` (or its references variant).

    Returns:
        :class:`~cortex_sessions.services.MessageInput`.
    """
    return services.MessageInput(
        role=item["role"],
        content=item["content"],
        source=item.get("source"),
        metadata=item.get("metadata"),
        usage=item.get("usage"),
    )


def _write(view: Any, request: Request, kwargs: dict[str, Any], keyed: KeyedCall) -> Any:
    """:attr:`OneStatement.write` of the append: ``None`` for a list body or session
    references (the action serves them); else the 201 answer, or ``None`` when
    ``append_recorded`` wrote nothing. Raises what the action raises for a bad body or
    session (400, 404, 409, 503)."""
    if not isinstance(request.data, Mapping):
        return None
    serializer = MessageWithReferencesInputSerializer(data=request.data)
    serializer.is_valid(raise_exception=True)
    data = serializer.validated_data
    if data["resolve_references"] or "references" in data:
        return None
    result = append_recorded(
        kwargs["pk"], message_input(data), keyed, status_code=status.HTTP_201_CREATED
    )
    return None if result is None else view._append_response(result)


def _replay(view: Any, kwargs: dict[str, Any], response: str) -> Any:
    """:attr:`OneStatement.replay` of the append: the first answer's body, rebuilt."""
    result = replay_recorded(kwargs["pk"], response)
    return None if result is None else view._append_response(result).data


#: The append's one-statement path (``@idempotent_with(ONE_MESSAGE)``).
ONE_MESSAGE = OneStatement(_write, _replay)
