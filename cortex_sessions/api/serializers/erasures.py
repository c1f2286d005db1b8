"""Serializers of erasure by scope (docs/design.md §18.2): the request and the record."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from cortex_sessions.models import Erasure

from .base import StrictSerializerMixin
from .fields import ScopeTextField

__all__ = ["ErasureCreateSerializer", "ErasureSerializer"]


class ErasureCreateSerializer(StrictSerializerMixin, serializers.Serializer[Any]):
    """Body of ``POST /erasures/``: the canonical scope to erase (any scope: the caller is a
    host operator, not a tenant)."""

    scope = ScopeTextField(help_text="Canonical scope whose sessions are erased; never empty.")


class ErasureSerializer(serializers.ModelSerializer[Erasure]):
    """An erasure record: what was asked, by whom, and rows deleted per table; never content."""

    counts = serializers.DictField(
        child=serializers.IntegerField(),
        read_only=True,
        help_text='Rows deleted per model label, e.g. {"cortex_sessions.Session": 3}.',
    )

    class Meta:
        model = Erasure
        fields = [
            "id",
            "scope",
            "status",
            "counts",
            "skipped_held",
            "requested_by",
            "created_at",
            "finished_at",
        ]
        read_only_fields = fields
