"""What the API's serializers share (docs/design.md §7.3, §12.4): strict request bodies
(:class:`StrictSerializerMixin`), the body of an action that takes none (:func:`refuse_body`)
and the body of every error (:class:`ErrorSerializer`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rest_framework import serializers
from rest_framework.exceptions import ErrorDetail

from .shared import SharedFieldsMixin

__all__ = [
    "EmptyBodySerializer",
    "ErrorItemSerializer",
    "ErrorSerializer",
    "StrictSerializerMixin",
    "refuse_body",
]


class StrictSerializerMixin(SharedFieldsMixin):
    """A body field the serializer does not define is a 400 naming it (docs/design.md §12.4).

    Its fields are built once per class (:class:`~.shared.SharedFieldsMixin`, §14.5).

    Each unknown key gets an error ``{"code": "unknown_field"}`` under its own name, together
    with the other field errors. Keys in ``ignored_fields`` (the read-only fields of
    docs/design.md §7.3, which a client may send back as it read them) are accepted and ignored.
    """

    #: Keys accepted and ignored.
    ignored_fields: frozenset[str] = frozenset()

    def to_internal_value(self, data: Any) -> Any:
        """DRF's validation plus the unknown-key check; all errors are reported together."""
        unknown: dict[str, list[ErrorDetail]] = {}
        if isinstance(data, Mapping):
            known = set(self.fields) | self.ignored_fields
            unknown = {
                str(key): [ErrorDetail("Unknown field.", code="unknown_field")]
                for key in data
                if key not in known
            }
        try:
            value = super().to_internal_value(data)  # type: ignore[misc]
        except serializers.ValidationError as exc:
            if unknown and isinstance(exc.detail, dict):
                merged: dict[Any, Any] = {**exc.detail, **unknown}
                raise serializers.ValidationError(merged) from None
            raise
        if unknown:
            raise serializers.ValidationError(unknown)
        return value


class ErrorItemSerializer(serializers.Serializer[Any]):
    """One field error."""

    code = serializers.CharField()
    detail = serializers.CharField()


class ErrorSerializer(serializers.Serializer[Any]):
    """Body of every error response (docs/design.md §7.3)."""

    code = serializers.CharField(help_text="Stable machine-readable code; branch on this.")
    detail = serializers.CharField(help_text="Human-readable explanation; may change.")
    errors = serializers.DictField(  # type: ignore[assignment]  # a field named like a Field attribute
        child=ErrorItemSerializer(many=True),
        required=False,
        help_text="Validation errors by field (nested fields as dotted paths).",
    )
    params = serializers.DictField(
        required=False,
        help_text=(
            "Values the error carries for the client to act on: `context_budget_exceeded` "
            "gives `max_tokens` (as asked) and `required` (the smallest budget that answers)."
        ),
    )


class EmptyBodySerializer(StrictSerializerMixin, serializers.Serializer[Any]):
    """The body of an action that takes none (make-default, archive, unarchive, pop): nothing
    or ``{}``; any key is 400 ``unknown_field`` naming it, as on every other endpoint
    (docs/design.md §12.4)."""


def refuse_body(request: Any) -> None:
    """Refuse a body with fields on an endpoint that defines none.

    Args:
        request: the DRF request; an absent body reads as ``{}``.

    Raises:
        rest_framework.exceptions.ValidationError: a key in the body (``unknown_field`` under
            its name) or a body that is not an object (``invalid``).
    """
    data = request.data
    if not data and not isinstance(data, (list, str)):
        return
    EmptyBodySerializer(data=data).is_valid(raise_exception=True)
