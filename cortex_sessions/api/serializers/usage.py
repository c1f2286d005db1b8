"""Serializers of the usage totals (docs/design.md §16.1): ``GET /sessions/usage/``."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from .fields import CostField

__all__ = ["UsageGroupSerializer", "UsageReportSerializer", "UsageTotalsSerializer"]


class UsageTotalsSerializer(serializers.Serializer[Any]):
    """Sums over some sessions (``services.UsageTotals`` without its key)."""

    sessions = serializers.IntegerField(min_value=0, help_text="How many sessions.")
    message_count = serializers.IntegerField(min_value=0, help_text="Their messages.")
    input_tokens = serializers.IntegerField(
        min_value=0, help_text="Sum of their messages' usage.input_tokens."
    )
    output_tokens = serializers.IntegerField(
        min_value=0, help_text="Sum of their messages' usage.output_tokens."
    )
    cost = CostField(help_text="Sum of their messages' usage.cost.")
    context_tokens = serializers.IntegerField(
        min_value=0, help_text="Sum of their context_tokens (docs/design.md §16.2)."
    )


class UsageGroupSerializer(UsageTotalsSerializer):
    """The sums of one group."""

    key = serializers.CharField(
        allow_null=True,
        help_text=(
            "group_by=agent_id: the agent id. group_by=scope: the canonical scope one level "
            "beneath the request's (e.g. org=acme/user=2 under org=acme); null for the "
            "sessions stored at exactly the request's scope."
        ),
    )


class UsageReportSerializer(serializers.Serializer[Any]):
    """Response of ``GET /sessions/usage/`` (docs/design.md §16.1)."""

    group_by = serializers.ChoiceField(
        choices=["agent_id", "scope"], allow_null=True, help_text="As asked; null: no grouping."
    )
    totals = UsageTotalsSerializer(help_text="The sums over every session the filters keep.")
    groups = UsageGroupSerializer(
        many=True,
        allow_null=True,
        help_text="With group_by: one entry per group that has sessions, ordered by key (null "
        "first); null without group_by.",
    )
