"""Serializers of the context window (docs/design.md §16.3, §16.4): the body of a compaction
and the answer of the context read."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from .base import StrictSerializerMixin
from .fields import ContentField, StrictFieldMixin
from .messages import MessageSerializer
from .rendering import PlannedRepresentationMixin

__all__ = ["CompactSerializer", "ContextWindowSerializer", "ThroughSeqField"]


@extend_schema_field({"type": "integer", "minimum": 1, "maximum": 2**63 - 1})
class ThroughSeqField(StrictFieldMixin, serializers.JSONField):
    """A compaction's ``through_seq``; the service checks it is a JSON integer from 1 to the
    session's last seq beyond the newest compaction's. Every bad value is 400
    ``invalid_through_seq``."""

    rule_code = "invalid_through_seq"


@extend_schema_field({"type": "object", "additionalProperties": True, "nullable": True})
class UsageInputField(serializers.JSONField):
    """A message's ``usage`` on input (docs/design.md §16.1); the service checks its keys and
    values (400 ``invalid_usage``)."""


class CompactSerializer(StrictSerializerMixin, serializers.Serializer[Any]):
    """Body of ``POST /sessions/{id}/compact/`` (docs/design.md §16.3)."""

    through_seq = ThroughSeqField(
        help_text=(
            "The newest seq the summary stands for: 1 to the session's last seq, beyond the "
            "newest live compaction's through_seq."
        )
    )
    summary = ContentField(
        help_text="The summary: a string or a list of content blocks, as a message's content."
    )
    usage = UsageInputField(
        required=False, allow_null=True, help_text="What producing the summary cost (§16.1)."
    )


class ContextWindowSerializer(PlannedRepresentationMixin, serializers.Serializer[Any]):
    """Response of ``GET /sessions/{id}/context/`` (docs/design.md §16.4)."""

    messages = MessageSerializer(
        many=True,
        help_text=(
            "The live compaction summary (when one governs), then the kept messages after its "
            "through_seq, in seq order."
        ),
    )
    compacted_through_seq = serializers.IntegerField(
        allow_null=True, help_text="The governing compaction's through_seq; null without one."
    )
    tokens = serializers.IntegerField(
        min_value=0, help_text="The sum of token_count over messages."
    )
    truncated = serializers.BooleanField(
        help_text="Whether max_tokens dropped any message after the summary."
    )
