"""Request-body serializers whose fields are built once per class (docs/design.md §14.5).

DRF deep-copies a serializer's declared fields and binds them on every instance, which costs
more than the validation itself for a one-message append. The API's body serializers hold no
per-request state in their fields (no context, no instance, nothing a field writes while it
validates), so :class:`SharedFieldsMixin` binds them once, to an instance of the class, and
every later instance validates with those. A partial serializer, or one given a context,
builds its own fields as DRF does: a field reads ``root.partial`` and ``context``.
"""

from __future__ import annotations

from typing import Any

from django.utils.functional import cached_property

__all__ = ["SharedFieldsMixin"]


class SharedFieldsMixin:
    """Mix into a body serializer, before DRF's ``Serializer``: ``fields`` is the class's
    once-bound fields unless the instance is partial or has a context."""

    _shared_fields: dict[type, Any] = {}

    @cached_property
    def fields(self) -> Any:
        """The bound fields (a ``BindingDict``): the class's shared ones, or the instance's own
        when it is partial or has a context."""
        if getattr(self, "partial", False) or getattr(self, "_context", None):
            return super().fields  # type: ignore[misc]
        cls = type(self)
        shared = SharedFieldsMixin._shared_fields.get(cls)
        if shared is None:
            template = cls()
            shared = super(SharedFieldsMixin, template).fields  # type: ignore[misc]
            SharedFieldsMixin._shared_fields[cls] = shared
        return shared
