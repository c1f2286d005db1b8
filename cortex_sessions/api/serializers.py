"""Serializers of the API (docs/design.md §3, §7.3).

Output serializers render sessions and messages with the field names of docs/design.md §3. Input
serializers check only the *shape* of a request (types, lengths) and describe it in the schema;
the business rules (agent id characters, metadata being an object, content blocks, sizes, NUL
characters) are enforced by :mod:`cortex_sessions.services`, whose errors the exception handler
maps. Input serializers declare only writable fields, so a client sending ``id``, ``scope``,
``message_count``, ``last_message``, ``backfilled_by``, ``is_default``, ``created_at`` or
``updated_at`` changes nothing: those keys are ignored.
"""

from __future__ import annotations

import re
from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from cortex_sessions.models import Message, Session

__all__ = [
    "ContentField",
    "CountSerializer",
    "ErrorSerializer",
    "ForkSerializer",
    "MessageAppendResultSerializer",
    "MessageInputSerializer",
    "MessagePageSerializer",
    "MessageSerializer",
    "MessageWithReferencesInputSerializer",
    "MessagesDeletedSerializer",
    "MetadataField",
    "PoppedMessageSerializer",
    "PreparedReferencesSerializer",
    "ReferenceCandidateListSerializer",
    "ReferenceCandidateSerializer",
    "ReferenceContextSerializer",
    "ReferencePrepareSerializer",
    "ReferencesField",
    "ResolveSerializer",
    "SessionCreateSerializer",
    "SessionMergePatchSerializer",
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
    """Message content on input: a string or a list of content blocks (docs/design.md §3.2)."""


@extend_schema_field({"type": "array", "items": _BLOCK_SCHEMA})
class BlocksField(serializers.JSONField):
    """Message content on output: the stored list of content blocks."""


@extend_schema_field(
    {
        "type": "array",
        "description": (
            "Sessions to reference, in the order the user selected them; mentions found in the "
            "content's text blocks follow them. Duplicates are dropped (the first wins); at "
            "most MAX_REFERENCES distinct sessions (hard maximum 3)."
        ),
        "items": {
            "type": "object",
            "properties": {
                "session_id": {
                    "type": "string",
                    "minLength": 1,
                    "description": "The referenced session's id (authoritative).",
                },
                "label": {
                    "type": "string",
                    "nullable": True,
                    "description": "Display label; default the id.",
                },
            },
            "required": ["session_id"],
            "additionalProperties": False,
        },
    }
)
class ReferencesField(serializers.JSONField):
    """Explicit session references ``[{"session_id", "label"?}, ...]`` (docs/design.md §8.3).

    Only the JSON is taken here; the reference service checks the shape and answers
    ``SESSION_REFERENCE_INVALID_REFERENCE`` for a malformed item, as the Python API does.
    """


class SessionSerializer(serializers.ModelSerializer):
    """A session as the API returns it (docs/design.md §3.1). Every field is read-only here."""

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
            "archived_at",
            "forked_from",
            "forked_at_seq",
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


@extend_schema_field({"type": "object", "additionalProperties": True, "nullable": True})
class MetadataPatchField(serializers.JSONField):
    """The ``metadata`` member of a merge patch: an object merged by RFC 7386, or ``null``."""


class SessionMergePatchSerializer(serializers.Serializer):
    """Body of ``PATCH /sessions/{id}/`` sent as ``application/merge-patch+json`` (§11.3).

    ``title`` and ``cwd`` are replaced when present; ``metadata`` is merged into the stored
    object by RFC 7386 (a ``null`` member deletes that key; ``"metadata": null`` empties it).
    """

    title = serializers.CharField(
        max_length=500, allow_blank=True, required=False, trim_whitespace=False
    )
    metadata = MetadataPatchField(required=False, allow_null=True)
    cwd = serializers.CharField(
        allow_null=True, allow_blank=True, required=False, trim_whitespace=False
    )


@extend_schema_field({"type": "integer", "minimum": 0, "maximum": 2**63 - 1})
class UpToSeqField(serializers.JSONField):
    """A fork point; the service checks it is a JSON integer from 0 to the source's last seq
    (400 ``invalid_up_to_seq`` for every bad value)."""


class ForkSerializer(serializers.Serializer):
    """Body of ``POST /sessions/{id}/fork/`` (docs/design.md §11.1); every field optional."""

    up_to_seq = UpToSeqField(
        required=False,
        allow_null=True,
        help_text="Copy the messages with seq up to this value (0 to the last seq); default all.",
    )
    title = serializers.CharField(
        max_length=500,
        allow_blank=True,
        required=False,
        allow_null=True,
        trim_whitespace=False,
        help_text="Default: the source's title.",
    )
    metadata = MetadataField(
        required=False, allow_null=True, help_text="Default: the source's metadata."
    )


class ResolveSerializer(serializers.Serializer):
    """Body of ``POST /sessions/resolve/`` (docs/design.md §6.1)."""

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
    """A stored message (docs/design.md §3.2)."""

    session = serializers.UUIDField(source="session_id", read_only=True, allow_null=True)
    content = BlocksField(read_only=True)
    metadata = MetadataField(read_only=True)

    class Meta:
        model = Message
        fields = ["id", "session", "seq", "role", "source", "content", "metadata", "created_at"]
        read_only_fields = fields


class MessageInputSerializer(serializers.Serializer):
    """One message in ``POST /sessions/{id}/messages/`` (docs/design.md §7.3)."""

    role = serializers.ChoiceField(choices=Message.Role.choices)
    content = ContentField()
    source = serializers.ChoiceField(
        choices=Message.Source.choices,
        required=False,
        help_text=(
            "Default: 'user' for the user role, 'host' for the others. 'session-reference' "
            "messages are written by the app only (resolve_references), never sent."
        ),
    )
    metadata = MetadataField(required=False)

    def validate_source(self, value: str) -> str:
        """Refuse ``session-reference``: only the app writes reference snapshots (§8.8)."""
        if value == Message.Source.SESSION_REFERENCE:
            raise serializers.ValidationError(
                "session-reference messages are written by the app (resolve_references).",
                code="invalid_source",
            )
        return value


class MessageWithReferencesInputSerializer(MessageInputSerializer):
    """A single message in ``POST /sessions/{id}/messages/``, which may resolve session
    references (docs/design.md §8.8).

    With ``resolve_references`` the message must have role ``user`` (and source ``user`` or
    none): its mentions are parsed, the references prepared, and the readable message and its
    context message are stored in one transaction.
    """

    resolve_references = serializers.BooleanField(
        required=False,
        default=False,
        help_text=(
            "Parse the session mentions in the content, prepare the referenced sessions and "
            "store the readable message followed by its session-reference context message. "
            "Only on a single message with role 'user'."
        ),
    )
    references = ReferencesField(
        required=False,
        help_text="Explicit references; only together with resolve_references: true.",
    )


class ReferencePrepareSerializer(serializers.Serializer):
    """Body of ``POST /sessions/{id}/references/prepare/`` (docs/design.md §8.8)."""

    content = ContentField(
        help_text="The user message: a string or content blocks; mentions in text blocks count."
    )
    references = ReferencesField(required=False)


class ReferenceCandidateSerializer(serializers.Serializer):
    """A session the user may mention, for the mention picker (docs/design.md §8.4)."""

    session_id = serializers.CharField()
    label = serializers.CharField(help_text="The session's title, or its id when untitled.")
    cwd = serializers.CharField(allow_null=True, allow_blank=True)
    created_at = serializers.IntegerField(help_text="Creation time in Unix epoch milliseconds.")
    same_workspace = serializers.BooleanField(
        help_text="Same cwd as the current session (ranked first)."
    )
    mention = serializers.CharField(
        help_text="Ready-made mention token, @[label](cortex-session:...)."
    )


class ReferenceCandidateListSerializer(serializers.Serializer):
    """Response of ``GET /sessions/{id}/reference-candidates/``: the candidates in rank order
    (same cwd, then no cwd, then the rest; newest first within a rank)."""

    results = ReferenceCandidateSerializer(many=True)


def constant_field(value: str, **kwargs: Any) -> serializers.Field:
    """A read-only string field that always holds ``value``, described as a one-value string
    pattern (an enum would become a named component whose ``role`` collides with messages')."""
    field_class = type("ConstantField", (serializers.CharField,), {})
    schema = {"type": "string", "pattern": f"^{re.escape(value)}$"}
    return extend_schema_field(schema)(field_class)(read_only=True, **kwargs)


class ReferenceSourceItemSerializer(serializers.Serializer):
    """One reference in a context's ``source`` record, with its retention stats (docs/design.md §8.7)."""

    session_id = serializers.CharField()
    label = serializers.CharField(allow_blank=True)
    captured_through_seq = serializers.IntegerField(min_value=0)
    input_index = serializers.IntegerField(min_value=0)
    compacted = serializers.BooleanField()
    original_messages = serializers.IntegerField(min_value=0)
    retained_messages = serializers.IntegerField(min_value=0)
    omitted_messages = serializers.IntegerField(min_value=0)
    omitted_bytes = serializers.IntegerField(min_value=0)
    truncated = serializers.BooleanField()


class ReferenceSourceSerializer(serializers.Serializer):
    """The ``source`` record of a reference context (docs/design.md §8.7)."""

    kind = constant_field("session-reference")
    form = constant_field("recall")
    version = serializers.IntegerField()
    references = ReferenceSourceItemSerializer(many=True)


class ReferenceContextSerializer(serializers.Serializer):
    """The aggregated, untrusted context of a referencing message (docs/design.md §8.7)."""

    role = constant_field("user")
    source = ReferenceSourceSerializer()
    content = BlocksField(
        help_text="One text block: the untrusted-data preamble and the snapshots as JSON "
        "inside <referenced-sessions> tags."
    )


class PreparedReferencesSerializer(serializers.Serializer):
    """Response of ``POST /sessions/{id}/references/prepare/``: the readable content and zero
    or one context (docs/design.md §8.8)."""

    content = BlocksField(help_text="The message content with mention tokens made readable.")
    contexts = ReferenceContextSerializer(
        many=True, help_text="Empty without references, else exactly one context."
    )


class MessageAppendResultSerializer(serializers.Serializer):
    """Response of ``POST /sessions/{id}/messages/``: the stored rows and the session's new
    counters."""

    session = SessionSerializer()
    messages = MessageSerializer(many=True)


class MessagesDeletedSerializer(serializers.Serializer):
    """Response of the message deletes (docs/design.md §11.4): the session's new counters and
    how many messages went."""

    session = SessionSerializer()
    deleted = serializers.IntegerField(min_value=0)


class PoppedMessageSerializer(serializers.Serializer):
    """Response of ``POST /sessions/{id}/messages/pop/`` (docs/design.md §11.4): the removed
    message and the session's new counters."""

    session = SessionSerializer()
    message = MessageSerializer()


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
    """Body of every error response (docs/design.md §7.3)."""

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
