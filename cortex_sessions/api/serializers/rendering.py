"""Output serializers rendered from a plan built once per class (docs/design.md §14.5).

DRF builds a serializer's fields on every instance: a ``ModelSerializer`` introspects its
model, deep-copies its declared fields and binds them, which cost more than the service call of
a one-row read. The response serializers of this API are static — the same fields for every
request, none reading the request or the context — so :class:`PlannedRepresentationMixin`
builds the fields once per class, from an instance of its own, and keeps for each field a
*step*: how to read the attribute and how to write it. The common field types get a direct
step (``str`` for a ``CharField``, the value itself for a ``JSONField``, ``isoformat`` for a
UTC ``DateTimeField`` under a UTC current time zone); every other value takes DRF's own path
(``field.get_attribute`` and ``field.to_representation``), so the output is DRF's, byte for
byte (``tests/api/test_rendering.py`` compares the two on every response serializer).

A serializer keeps DRF's behaviour everywhere else: ``fields`` (the schema, the browsable
API, validation) is DRF's, built per instance as before. A class with a field that reads its
parent or the context (a ``SerializerMethodField``, a hyperlinked field, any field type the
plan does not know) is rendered by DRF's ``to_representation`` unchanged.
"""

from __future__ import annotations

import datetime
import zoneinfo
from collections.abc import Callable, Mapping
from typing import Any

from django.conf import settings
from django.utils import timezone
from rest_framework import ISO_8601, serializers
from rest_framework.fields import SkipField
from rest_framework.relations import PKOnlyObject
from rest_framework.settings import api_settings

__all__ = ["PlannedRepresentationMixin", "iso_datetime"]

_MISSING = object()
#: Time zones in which a UTC datetime keeps its ``+00:00`` offset.
_UTC_ZONES = (datetime.UTC, zoneinfo.ZoneInfo("UTC"))

#: ``(field name, attribute, direct writer or None, field)``; ``None``: DRF's own path.
_Step = tuple[str, str, Callable[[Any], Any] | None, serializers.Field[Any, Any, Any, Any]]


def iso_datetime(value: Any, field: Any) -> Any:
    """``DateTimeField.to_representation(value)`` for ``field``, quickly for the usual case:
    a UTC datetime, the ISO 8601 output format and a UTC current time zone (DRF's
    ``astimezone`` changes nothing then) is its ``isoformat()`` with ``Z`` for ``+00:00``.

    Args:
        value: the attribute (not ``None``).
        field: the ``DateTimeField`` (its own path serves every other case).

    Returns:
        The text DRF writes.
    """
    if (
        type(value) is datetime.datetime
        and value.tzinfo in _UTC_ZONES
        and api_settings.DATETIME_FORMAT == ISO_8601
        and settings.USE_TZ
        and timezone.get_current_timezone() in _UTC_ZONES
    ):
        return value.isoformat()[:-6] + "Z"
    return field.to_representation(value)


def _direct(field: Any) -> Callable[[Any], Any] | None:
    """The direct writer of ``field``'s non-``None`` values, or ``None`` (DRF's path)."""
    method = type(field).to_representation
    if method is serializers.CharField.to_representation:
        return lambda value: value if type(value) is str else str(value)
    if method is serializers.IntegerField.to_representation:
        return lambda value: value if type(value) is int else int(value)
    if method is serializers.BooleanField.to_representation:
        return lambda value: value if type(value) is bool else field.to_representation(value)
    if method is serializers.JSONField.to_representation and not field.binary:
        return lambda value: value
    if method is serializers.UUIDField.to_representation and field.uuid_format == "hex_verbose":
        return str
    if method is serializers.DateTimeField.to_representation and not hasattr(field, "format"):
        return lambda value: iso_datetime(value, field)
    if isinstance(field, PlannedRepresentationMixin):
        return field.to_representation if field.render_plan() is not None else None
    if isinstance(field, serializers.ListSerializer) and isinstance(
        field.child, PlannedRepresentationMixin
    ):
        child = field.child
        if child.render_plan() is None:
            return None
        return lambda value: [child.to_representation(item) for item in _items(value)]
    return None


def _items(value: Any) -> Any:
    from django.db.models import Manager

    return value.all() if isinstance(value, Manager) else value


class PlannedRepresentationMixin:
    """Render with a per-class plan of the fields (see the module's docstring); mix into a
    read-only response serializer before DRF's ``Serializer``."""

    _render_plans: dict[type, tuple[_Step, ...] | None] = {}

    @classmethod
    def render_plan(cls) -> tuple[_Step, ...] | None:
        """The class's steps, built on the first call; ``None`` when a field needs DRF's own
        ``to_representation`` (one that reads the parent, the context or the request)."""
        try:
            return PlannedRepresentationMixin._render_plans[cls]
        except KeyError:
            pass
        template: Any = cls()
        steps: list[_Step] = []
        plan: tuple[_Step, ...] | None
        for field in template._readable_fields:
            if field.source == "*" or len(field.source_attrs) != 1:
                plan = None
                break
            writer = _direct(field)
            if writer is None and not _context_free(field):
                plan = None
                break
            steps.append((field.field_name, field.source_attrs[0], writer, field))
        else:
            plan = tuple(steps)
        PlannedRepresentationMixin._render_plans[cls] = plan
        return plan

    def _fields_changed(self, plan: tuple[_Step, ...]) -> bool:
        """Whether this instance's ``fields``, if something built them, are not the plan's (a
        host popped, added or renamed one, as DRF's dynamic-fields pattern does); checked
        once per instance and number of fields."""
        built = self.__dict__.get("fields")  # DRF's cached_property, once built
        if built is None:
            return False
        seen = self.__dict__.get("_cortex_fields_checked")
        if seen is not None and seen[0] == len(built):
            return bool(seen[1])
        readable = [name for name, field in built.items() if not field.write_only]
        changed = readable != [step[0] for step in plan]
        self.__dict__["_cortex_fields_checked"] = (len(built), changed)
        return changed

    def to_representation(self, instance: Any) -> Any:
        """``Serializer.to_representation`` from the class's plan (DRF's when it has none).

        Returns:
            The row as DRF writes it: a dict of the readable fields, ``None`` values kept,
            fields whose attribute is absent and not required left out.
        """
        plan = type(self).render_plan()
        if plan is None or self._fields_changed(plan):  # DRF's dynamic fields: DRF's own path
            return super().to_representation(instance)  # type: ignore[misc]
        is_mapping = isinstance(instance, Mapping)
        ret: dict[str, Any] = {}
        for name, attribute, writer, field in plan:
            try:
                value = instance[attribute] if is_mapping else getattr(instance, attribute)
            except Exception:  # DRF's rules below decide (a default, SkipField, the error)
                value = _MISSING
            if value is _MISSING or callable(value) or isinstance(value, PKOnlyObject):
                try:  # DRF's own rules (defaults, SkipField, callables, related pks)
                    value = field.get_attribute(instance)
                except SkipField:
                    continue
                check = value.pk if isinstance(value, PKOnlyObject) else value
                ret[name] = None if check is None else field.to_representation(value)
                continue
            if value is None:
                ret[name] = None
            elif writer is not None:
                ret[name] = writer(value)
            else:
                ret[name] = field.to_representation(value)
        return ret


#: Field types whose ``to_representation`` reads only the value (not the parent, the context
#: or the request): rendered through DRF's own method from the shared, once-built field.
_CONTEXT_FREE = (
    serializers.ChoiceField,
    serializers.CharField,
    serializers.IntegerField,
    serializers.FloatField,
    serializers.DecimalField,
    serializers.BooleanField,
    serializers.UUIDField,
    serializers.DateTimeField,
    serializers.DateField,
    serializers.JSONField,
)


def _context_free(field: Any) -> bool:
    """Whether DRF's ``to_representation`` of ``field`` may run on a field bound once to
    another instance of the class: a known value-only type, not a relation or method field."""
    return isinstance(field, _CONTEXT_FREE) and not isinstance(
        field, serializers.SerializerMethodField | serializers.HiddenField
    )
