"""Serializers of session references (docs/design.md §8): the mention picker's candidates,
the body of preparing a message's references, and the prepared content and context."""

from __future__ import annotations

import re
from typing import Any, cast

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from .base import StrictSerializerMixin
from .fields import BlocksField, ContentField, ReferencesField

__all__ = [
    "PreparedReferencesSerializer",
    "ReferenceCandidateListSerializer",
    "ReferenceCandidateSerializer",
    "ReferenceContextSerializer",
    "ReferencePrepareSerializer",
    "ReferenceSourceItemSerializer",
    "ReferenceSourceSerializer",
    "constant_field",
]


class ReferencePrepareSerializer(StrictSerializerMixin, serializers.Serializer[Any]):
    """Body of ``POST /sessions/{id}/references/prepare/`` (docs/design.md §8.8)."""

    content = ContentField(
        help_text="The user message: a string or content blocks; mentions in text blocks count."
    )
    references = ReferencesField(required=False)


class ReferenceCandidateSerializer(serializers.Serializer[Any]):
    """A session the user may mention, for the mention picker (docs/design.md §8.4)."""

    session_id = serializers.CharField()
    label = serializers.CharField(help_text="The session's title, or its id when untitled.")  # type: ignore[assignment]  # a field named like a Field attribute
    cwd = serializers.CharField(allow_null=True, allow_blank=True)
    created_at = serializers.IntegerField(help_text="Creation time in Unix epoch milliseconds.")
    same_workspace = serializers.BooleanField(
        help_text="Same cwd as the current session (ranked first)."
    )
    mention = serializers.CharField(
        help_text="Ready-made mention token, @[label](cortex-session:...)."
    )


class ReferenceCandidateListSerializer(serializers.Serializer[Any]):
    """Response of ``GET /sessions/{id}/reference-candidates/``: the candidates in rank order
    (same cwd, then no cwd, then the rest; newest first within a rank)."""

    results = ReferenceCandidateSerializer(many=True)


def constant_field(value: str, **kwargs: Any) -> serializers.Field[Any, Any, Any, Any]:
    """A read-only string field that always holds ``value``, described as a one-value string
    pattern (an enum would become a named component whose ``role`` collides with messages')."""
    field_class = type("ConstantField", (serializers.CharField,), {})
    schema = {"type": "string", "pattern": f"^{re.escape(value)}$"}
    field = extend_schema_field(schema)(field_class)(read_only=True, **kwargs)
    return cast(serializers.Field[Any, Any, Any, Any], field)


class ReferenceSourceItemSerializer(serializers.Serializer[Any]):
    """One reference in a context's ``source`` record, with its retention stats (docs/design.md §8.7)."""

    session_id = serializers.CharField()
    label = serializers.CharField(allow_blank=True)  # type: ignore[assignment]  # a field named like a Field attribute
    captured_through_seq = serializers.IntegerField(min_value=0)
    input_index = serializers.IntegerField(min_value=0)
    compacted = serializers.BooleanField()
    original_messages = serializers.IntegerField(min_value=0)
    retained_messages = serializers.IntegerField(min_value=0)
    omitted_messages = serializers.IntegerField(min_value=0)
    omitted_bytes = serializers.IntegerField(min_value=0)
    truncated = serializers.BooleanField()


class ReferenceSourceSerializer(serializers.Serializer[Any]):
    """The ``source`` record of a reference context (docs/design.md §8.7)."""

    kind = constant_field("session-reference")
    form = constant_field("recall")
    version = serializers.IntegerField()
    references = ReferenceSourceItemSerializer(many=True)


class ReferenceContextSerializer(serializers.Serializer[Any]):
    """The aggregated, untrusted context of a referencing message (docs/design.md §8.7)."""

    role = constant_field("user")
    source = ReferenceSourceSerializer()  # type: ignore[assignment]  # a field named like a Field attribute
    content = BlocksField(
        help_text="One text block: the untrusted-data preamble and the snapshots as JSON "
        "inside <referenced-sessions> tags."
    )


class PreparedReferencesSerializer(serializers.Serializer[Any]):
    """Response of ``POST /sessions/{id}/references/prepare/``: the readable content and zero
    or one context (docs/design.md §8.8)."""

    content = BlocksField(help_text="The message content with mention tokens made readable.")
    contexts = ReferenceContextSerializer(
        many=True, help_text="Empty without references, else exactly one context."
    )
