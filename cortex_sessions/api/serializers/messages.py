"""Serializers of messages (docs/design.md §3.2, §7.3, §11.4): a message as read and paged
(with a search ``match``), the bodies of an append (with session references or not), and the
answers of append, pop and delete."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from cortex_sessions.models import Message

from .base import StrictSerializerMixin
from .fields import (
    BlocksField,
    ContentField,
    MetadataField,
    ReferencesField,
    StrictBooleanField,
    StrictChoiceField,
    UsageField,
)
from .rendering import PlannedRepresentationMixin
from .sessions import SearchMatchSerializer, SearchResultMixin, SessionSerializer

__all__ = [
    "INPUT_SOURCES",
    "MESSAGE_READ_ONLY_FIELDS",
    "InputSourceField",
    "ListedMessageSerializer",
    "MessageAppendResultSerializer",
    "MessageInputSerializer",
    "MessagePageSerializer",
    "MessageSerializer",
    "MessageWithReferencesInputSerializer",
    "MessagesDeletedSerializer",
    "PoppedMessageSerializer",
    "message_list_data",
]

#: Fields of a stored message that only the app writes; a message sent back may carry them.
MESSAGE_READ_ONLY_FIELDS = frozenset(
    {"id", "session", "seq", "created_at", "match", "compacts_through_seq", "token_count"}
)


class MessageSerializer(PlannedRepresentationMixin, serializers.ModelSerializer[Message]):
    """A stored message (docs/design.md §3.2)."""

    session = serializers.UUIDField(source="session_id", read_only=True, allow_null=True)
    content = BlocksField(read_only=True)
    metadata = MetadataField(read_only=True)
    usage = UsageField(read_only=True)
    token_count = serializers.IntegerField(
        read_only=True,
        help_text="The tokens the message takes in a model's context (TOKEN_COUNTER; §16.2).",
    )

    class Meta:
        model = Message
        fields = [
            "id",
            "session",
            "seq",
            "role",
            "source",
            "content",
            "metadata",
            "created_at",
            "compacts_through_seq",
            "usage",
            "token_count",
        ]
        read_only_fields = fields


class ListedMessageSerializer(SearchResultMixin, MessageSerializer):
    """A message in a page: the message, and ``match`` when the page was a search."""

    match = SearchMatchSerializer(
        source="search_match",
        read_only=True,
        help_text="Only with q: why the message matched.",
    )

    class Meta(MessageSerializer.Meta):
        fields = [*MessageSerializer.Meta.fields, "match"]
        read_only_fields = fields


#: The sources a client may send: every one but ``session-reference``, which only the app
#: writes (docs/design.md §8.8).
INPUT_SOURCES = [
    value for value in Message.Source.values if value != Message.Source.SESSION_REFERENCE
]


# The enum sits inside ``allOf`` so that drf-spectacular does not make it a component: a
# second choice set under the name ``source`` (next to the messages' ``SourceEnum``) would be a
# naming collision warning for every host.
@extend_schema_field({"allOf": [{"type": "string", "enum": INPUT_SOURCES}]})
class InputSourceField(StrictChoiceField):
    """A message's ``source`` on input: ``session-reference`` is ``invalid_source`` like any
    other value outside :data:`INPUT_SOURCES`, and the schema's enum leaves it out."""

    def to_internal_value(self, data: Any) -> Any:
        """``data`` if it is a source a client may send; else 400 ``invalid_source``."""
        if data == Message.Source.SESSION_REFERENCE:
            raise serializers.ValidationError(
                "session-reference messages are written by the app (resolve_references).",
                code="invalid_source",
            )
        return super().to_internal_value(data)


class MessageInputSerializer(StrictSerializerMixin, serializers.Serializer[Any]):
    """One message in ``POST /sessions/{id}/messages/`` (docs/design.md §7.3)."""

    ignored_fields = MESSAGE_READ_ONLY_FIELDS

    role = StrictChoiceField(choices=Message.Role.choices, rule_code="invalid_role")
    content = ContentField()
    source = InputSourceField(  # type: ignore[assignment]  # a field named like a Field attribute
        choices=Message.Source.choices,
        rule_code="invalid_source",
        required=False,
        help_text=(
            "Default: 'user' for the user role, 'host' for the others. 'session-reference' "
            "messages are written by the app only (resolve_references), never sent."
        ),
    )
    metadata = MetadataField(required=False)
    usage = UsageField(required=False, allow_null=True)


class MessageWithReferencesInputSerializer(MessageInputSerializer):
    """A single message in ``POST /sessions/{id}/messages/``, which may resolve session
    references (docs/design.md §8.8).

    With ``resolve_references`` the message must have role ``user`` (and source ``user`` or
    none): its mentions are parsed, the references prepared, and the readable message and its
    context message are stored in one transaction.
    """

    resolve_references = StrictBooleanField(
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


class MessageAppendResultSerializer(PlannedRepresentationMixin, serializers.Serializer[Any]):
    """Response of ``POST /sessions/{id}/messages/``: the stored rows and the session's new
    counters."""

    session = SessionSerializer()
    messages = MessageSerializer(many=True)


class MessagesDeletedSerializer(PlannedRepresentationMixin, serializers.Serializer[Any]):
    """Response of the message deletes (docs/design.md §11.4): the session's new counters and
    how many messages went."""

    session = SessionSerializer()
    deleted = serializers.IntegerField(min_value=0)


class PoppedMessageSerializer(PlannedRepresentationMixin, serializers.Serializer[Any]):
    """Response of ``POST /sessions/{id}/messages/pop/`` (docs/design.md §11.4): the removed
    message and the session's new counters."""

    session = SessionSerializer()
    message = MessageSerializer()


class MessagePageSerializer(PlannedRepresentationMixin, serializers.Serializer[Any]):
    """Response of ``GET /sessions/{id}/messages/``: one page, chronological (by ``seq``)."""

    results = ListedMessageSerializer(many=True)
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
