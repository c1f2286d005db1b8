"""Serializers of the API (DESIGN §3, §7.3).

Output serializers render sessions and messages with the field names of DESIGN §3. Input
serializers check only the *shape* of a request (types, lengths) and describe it in the schema;
the business rules (agent id characters, metadata being an object, content blocks, sizes, NUL
characters) are enforced by :mod:`cortex_sessions.services`, whose errors the exception handler
maps. Input serializers declare only writable fields, so a client sending ``id``, ``scope``,
``message_count``, ``last_message``, ``backfilled_by``, ``is_default``, ``created_at`` or
``updated_at`` changes nothing: those keys are ignored.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from cortex_sessions.models import Message, Session

__all__ = [
    "ContentField",
    "CountSerializer",
    "ErrorSerializer",
    "MessageAppendResultSerializer",
    "MessageInputSerializer",
    "MessagePageSerializer",
    "MessageSerializer",
    "MetadataField",
    "ResolveSerializer",
    "SessionCreateSerializer",
    "SessionSerializer",
    "SessionUpdateSerializer",
]

_BLOCK_SCHEMA = {
    "type": "object",
    "description": (
        "A content block: {'type': 'text', 'text': ...} or any other type, kept as given."
    ),
    "properties": {"type": {"type": "string", "minLength": 1}, "text": {"type": "string"}},
    "required": ["type"],
    "additionalProperties": True,
}


@extend_schema_field({"type": "object", "additionalProperties": True})
class MetadataField(serializers.JSONField):
    """Host-owned JSON object; the service refuses anything but an object (``invalid_metadata``)."""


@extend_schema_field(
    {
        "oneOf": [
            {"type": "string", "description": "Becomes one text block."},
            {"type": "array", "items": _BLOCK_SCHEMA, "minItems": 1},
        ]
    }
)
class ContentField(serializers.JSONField):
    """Message content on input: a string or a list of content blocks (DESIGN §3.2)."""


@extend_schema_field({"type": "array", "items": _BLOCK_SCHEMA})
class BlocksField(serializers.JSONField):
    """Message content on output: the stored list of content blocks."""


class SessionSerializer(serializers.ModelSerializer):
    """A session as the API returns it (DESIGN §3.1). Every field is read-only here."""

    metadata = MetadataField(read_only=True)

    class Meta:
        model = Session
        fields = [
            "id",
            "agent_id",
            "scope",
            "title",
            "metadata",
            "cwd",
            "message_count",
            "last_message",
            "is_default",
            "backfilled_by",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields


class SessionCreateSerializer(serializers.Serializer):
    """Body of ``POST /sessions/``: the host-owned fields, the agent and an optional scope."""

    agent_id = serializers.CharField(max_length=255, trim_whitespace=False)
    title = serializers.CharField(
        max_length=500, allow_blank=True, required=False, default="", trim_whitespace=False
    )
    metadata = MetadataField(required=False, default=dict)
    cwd = serializers.CharField(
        allow_null=True, allow_blank=True, required=False, default=None, trim_whitespace=False
    )
    scope = serializers.CharField(
        required=False,
        max_length=1024,
        trim_whitespace=False,
        help_text=(
            "Canonical scope to create the session at; at or beneath the request's scope. "
            "Default: the request's scope."
        ),
    )


class SessionUpdateSerializer(serializers.Serializer):
    """Body of ``PUT``/``PATCH /sessions/{id}/``: only ``title``, ``metadata`` and ``cwd``.

    Fields left out are not changed, with ``PUT`` as with ``PATCH``.
    """

    title = serializers.CharField(
        max_length=500, allow_blank=True, required=False, trim_whitespace=False
    )
    metadata = MetadataField(required=False)
    cwd = serializers.CharField(
        allow_null=True, allow_blank=True, required=False, trim_whitespace=False
    )


class ResolveSerializer(serializers.Serializer):
    """Body of ``POST /sessions/resolve/`` (DESIGN §6.1)."""

    agent_id = serializers.CharField(max_length=255, trim_whitespace=False)
    session_id = serializers.UUIDField(
        required=False,
        allow_null=True,
        help_text="Use this session (it must be the agent's and in scope) instead of the default.",
    )


class CountSerializer(serializers.Serializer):
    """Response of ``GET /sessions/count/``."""

    count = serializers.IntegerField(min_value=0)


class MessageSerializer(serializers.ModelSerializer):
    """A stored message (DESIGN §3.2)."""

    session = serializers.UUIDField(source="session_id", read_only=True, allow_null=True)
    content = BlocksField(read_only=True)
    metadata = MetadataField(read_only=True)

    class Meta:
        model = Message
        fields = ["id", "session", "seq", "role", "source", "content", "metadata", "created_at"]
        read_only_fields = fields


class MessageInputSerializer(serializers.Serializer):
    """One message in ``POST /sessions/{id}/messages/`` (DESIGN §7.3)."""

    role = serializers.ChoiceField(choices=Message.Role.choices)
    content = ContentField()
    source = serializers.ChoiceField(
        choices=Message.Source.choices,
        required=False,
        help_text="Default: 'user' for the user role, 'host' for the others.",
    )
    metadata = MetadataField(required=False)


class MessageAppendResultSerializer(serializers.Serializer):
    """Response of ``POST /sessions/{id}/messages/``: the stored rows and the session's new
    counters."""

    session = SessionSerializer()
    messages = MessageSerializer(many=True)


class MessagePageSerializer(serializers.Serializer):
    """Response of ``GET /sessions/{id}/messages/``: one page, chronological (by ``seq``)."""

    results = MessageSerializer(many=True)
    has_more = serializers.BooleanField(
        help_text="More messages lie beyond this page in the reading direction."
    )
    next = serializers.URLField(
        allow_null=True,
        help_text=(
            "The following page: older messages when reading newest-first (no parameter or "
            "before_seq), newer ones when reading forward with after_seq alone; null at the end."
        ),
    )


class ErrorItemSerializer(serializers.Serializer):
    """One field error."""

    code = serializers.CharField()
    detail = serializers.CharField()


class ErrorSerializer(serializers.Serializer):
    """Body of every error response (DESIGN §7.3)."""

    code = serializers.CharField(help_text="Stable machine-readable code; branch on this.")
    detail = serializers.CharField(help_text="Human-readable explanation; may change.")
    errors = serializers.DictField(
        child=ErrorItemSerializer(many=True),
        required=False,
        help_text="Validation errors by field (nested fields as dotted paths).",
    )


def message_list_data(data: Any) -> tuple[list[dict[str, Any]], Any]:
    """Validate a message-append body: one message object or a non-empty list of them.

    Returns:
        ``(validated messages, serializer)``.

    Raises:
        rest_framework.exceptions.ValidationError: a shape error (400 ``invalid``).
    """
    many = isinstance(data, list)
    serializer = (
        MessageInputSerializer(data=data, many=many, allow_empty=False)
        if many
        else (MessageInputSerializer(data=data))
    )
    serializer.is_valid(raise_exception=True)
    validated = serializer.validated_data
    return (list(validated) if many else [validated]), serializer
