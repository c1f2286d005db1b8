"""Serializers of sessions (docs/design.md §3.1, §6.1, §7.3, §11): a session as read, listed
(with a search ``match``) and counted, and the bodies of create, update, merge patch, fork and
resolve."""

from __future__ import annotations

from typing import Any

from django.utils.dateparse import parse_datetime
from django.utils.translation import gettext_lazy as _
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from cortex_sessions.models import Session

from .base import StrictSerializerMixin
from .fields import (
    AgentIdField,
    CostField,
    CwdField,
    MetadataField,
    ScopeTextField,
    StrictFieldMixin,
    StrictUUIDField,
    TitleField,
)
from .rendering import PlannedRepresentationMixin

__all__ = [
    "SESSION_READ_ONLY_FIELDS",
    "CountSerializer",
    "ForkSerializer",
    "ListedSessionSerializer",
    "MetadataPatchField",
    "ResolveSerializer",
    "SearchMatchSerializer",
    "SearchResultMixin",
    "SessionCreateSerializer",
    "SessionMergePatchSerializer",
    "SessionSerializer",
    "SessionUpdateSerializer",
    "UpToSeqField",
]

#: Fields of a session that only the app writes (docs/design.md §7.3); a body may carry them.
SESSION_READ_ONLY_FIELDS = frozenset(
    {
        "id",
        "scope",
        "agent_id",
        "is_default",
        "message_count",
        "last_message",
        "backfilled_by",
        "created_at",
        "updated_at",
        "archived_at",
        "forked_from",
        "forked_at_seq",
        "legal_hold",  # the admin's and the host's, never the client's (docs/design.md §18.1)
        "input_tokens",
        "output_tokens",
        "cost",
        "context_tokens",
        "match",  # of a search result (docs/design.md §11.5)
    }
)


class SessionSerializer(PlannedRepresentationMixin, serializers.ModelSerializer[Session]):
    """A session as the API returns it (docs/design.md §3.1). Every field is read-only here."""

    metadata = MetadataField(read_only=True)
    cost = CostField(help_text="Sum of the messages' usage.cost (docs/design.md §16.1).")

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
            "expires_at",
            "legal_hold",
            "input_tokens",
            "output_tokens",
            "cost",
            "context_tokens",
        ]
        read_only_fields = fields


class SearchMatchSerializer(PlannedRepresentationMixin, serializers.Serializer[Any]):
    """Why a result matched ``q`` (docs/design.md §11.5): ``{snippet, seq, rank}``."""

    snippet = serializers.CharField(
        read_only=True,
        help_text=(
            "A short passage of the best-matching text, HTML-escaped, each hit wrapped in "
            "<mark>…</mark> (the only markup it holds): safe to insert as HTML."
        ),
    )
    seq = serializers.IntegerField(
        read_only=True,
        allow_null=True,
        help_text="The seq of the message the snippet comes from; null for a title match.",
    )
    rank = serializers.FloatField(
        read_only=True,
        allow_null=True,
        help_text="Relevance, higher is better (PostgreSQL ts_rank); null on SQLite.",
    )


class SearchResultMixin:
    """Adds ``match`` to a serialized row read with ``q`` and leaves it out otherwise, so a
    row has one shape wherever it is returned unless it is a search result. The schema lists
    ``match`` as optional (:attr:`optional_fields`, read by ``CortexAutoSchema``); a row
    leaves out an optional field that is ``None`` (``PlannedRepresentationMixin``, which the
    serializer it is mixed into must have)."""

    #: Response fields that may be absent.
    optional_fields: tuple[str, ...] = ("match",)


class ListedSessionSerializer(SearchResultMixin, SessionSerializer):
    """A session in a list: the session, and ``match`` when the list was a search."""

    match = SearchMatchSerializer(
        source="search_match",
        read_only=True,
        help_text="Only with q: why the session matched (its best message, or its title).",
    )

    class Meta(SessionSerializer.Meta):
        fields = [*SessionSerializer.Meta.fields, "match"]
        read_only_fields = fields


class AwareDateTimeField(serializers.DateTimeField):
    """A date-time that must carry its UTC offset (``…Z`` or ``…+02:00``): a value without one
    (``"2027-01-01T00:00:00"``, ``"2027-01-01"``) is refused with ``invalid`` rather than read in
    the server's time zone, so the API, the services and the import read one string alike
    (docs/design.md §18.1)."""

    default_error_messages = {
        "invalid": _("Datetime has wrong format. Give an ISO 8601 date-time with its UTC offset.")
    }

    def to_internal_value(self, value: Any) -> Any:
        """DRF's parse, after checking that a string names its offset."""
        if isinstance(value, str):
            try:
                parsed = parse_datetime(value.strip())
            except ValueError:  # well formed, no such date (February 30th)
                parsed = None
            if parsed is None or parsed.tzinfo is None:
                self.fail("invalid")
        return super().to_internal_value(value)


def expires_at_field() -> serializers.DateTimeField:
    """The writable ``expires_at`` of a request body (docs/design.md §18.1): ISO 8601 with the
    UTC offset, or ``null`` for never; a bad format (or no offset) is 400 ``invalid`` naming it,
    nothing written."""
    return AwareDateTimeField(
        required=False,
        allow_null=True,
        help_text=(
            "When the session expires (ISO 8601; give the UTC offset), or null for never. "
            "From then on every read hides it, and the expiry sweep deletes it unless it is "
            "on legal hold."
        ),
    )


class SessionCreateSerializer(StrictSerializerMixin, serializers.Serializer[Any]):
    """Body of ``POST /sessions/``: the host-owned fields, the agent and an optional scope."""

    ignored_fields = SESSION_READ_ONLY_FIELDS - {"agent_id", "scope"}

    agent_id = AgentIdField()
    title = TitleField(required=False, default="")
    metadata = MetadataField(required=False, default=dict)
    cwd = CwdField(required=False, default=None)
    expires_at = expires_at_field()
    scope = ScopeTextField(
        required=False,
        help_text=(
            "Canonical scope to create the session at; at or beneath the request's scope. "
            "Default: the request's scope."
        ),
    )


class SessionUpdateSerializer(StrictSerializerMixin, serializers.Serializer[Any]):
    """Body of ``PUT``/``PATCH /sessions/{id}/``: only ``title``, ``metadata``, ``cwd`` and
    ``expires_at``.

    Fields left out are not changed, with ``PUT`` as with ``PATCH``. The other fields of a
    session as read (``id``, ``agent_id``, ``scope``, counters, …) are accepted and ignored, so
    a client may send back what it read; any other key is 400 ``unknown_field``.
    """

    ignored_fields = SESSION_READ_ONLY_FIELDS

    title = TitleField(required=False)
    metadata = MetadataField(required=False)
    cwd = CwdField(required=False)
    expires_at = expires_at_field()


@extend_schema_field({"type": "object", "additionalProperties": True, "nullable": True})
class MetadataPatchField(serializers.JSONField):
    """The ``metadata`` member of a merge patch: an object merged by RFC 7386, or ``null``."""


class SessionMergePatchSerializer(StrictSerializerMixin, serializers.Serializer[Any]):
    """Body of ``PATCH /sessions/{id}/`` sent as ``application/merge-patch+json`` (§11.3).

    ``title``, ``cwd`` and ``expires_at`` are replaced when present; ``metadata`` is merged into the stored
    object by RFC 7386 (a ``null`` member deletes that key; ``"metadata": null`` empties it).
    Read-only fields are accepted and ignored; any other key is 400 ``unknown_field``.
    """

    ignored_fields = SESSION_READ_ONLY_FIELDS

    title = TitleField(required=False)
    metadata = MetadataPatchField(required=False, allow_null=True)
    cwd = CwdField(required=False)
    expires_at = expires_at_field()


@extend_schema_field({"type": "integer", "minimum": 0, "maximum": 2**63 - 1})
class UpToSeqField(StrictFieldMixin, serializers.JSONField):
    """A fork point; the service checks it is a JSON integer from 0 to the source's last seq.
    Every bad value is 400 ``invalid_up_to_seq``, ``null`` included (it is not an integer;
    leave the field out to copy everything)."""

    rule_code = "invalid_up_to_seq"


class ForkSerializer(StrictSerializerMixin, serializers.Serializer[Any]):
    """Body of ``POST /sessions/{id}/fork/`` (docs/design.md §11.1); every field optional, any
    other key is 400 ``unknown_field``. ``title`` and ``metadata`` follow the rules they have
    in ``POST /sessions/`` (``null`` is ``invalid`` and ``invalid_metadata``); left out, they
    are the source's."""

    up_to_seq = UpToSeqField(
        required=False,
        help_text=(
            "Copy the messages with seq up to this value (0 to the source's last seq); default all."
        ),
    )
    title = TitleField(required=False, help_text="Default: the source's title.")
    metadata = MetadataField(required=False, help_text="Default: the source's metadata.")


class ResolveSerializer(StrictSerializerMixin, serializers.Serializer[Any]):
    """Body of ``POST /sessions/resolve/`` (docs/design.md §6.1)."""

    agent_id = AgentIdField()
    session_id = StrictUUIDField(
        required=False,
        allow_null=True,
        help_text="Use this session (it must be the agent's and in scope) instead of the default.",
    )


class CountSerializer(PlannedRepresentationMixin, serializers.Serializer[Any]):
    """Response of ``GET /sessions/count/``."""

    count = serializers.IntegerField(min_value=0)
