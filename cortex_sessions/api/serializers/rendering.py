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
import decimal
import uuid
import zoneinfo
from collections.abc import Callable, Mapping
from typing import Any, cast

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
    """The direct writer of ``field``'s non-``None`` values, or ``None`` (DRF's path); a
    ``DateTimeField``'s and a ``BigIntegerField``'s depend on settings (:func:`_writer`)."""
    method = type(field).to_representation
    if method is serializers.CharField.to_representation:
        return lambda value: value if type(value) is str else str(value)
    if method is serializers.IntegerField.to_representation:
        return lambda value: value if type(value) is int else int(value)
    if method is serializers.BigIntegerField.to_representation:
        return _BIGINT
    if method is serializers.BooleanField.to_representation:
        return lambda value: value if type(value) is bool else field.to_representation(value)
    if method is serializers.ChoiceField.to_representation:
        # DRF maps str(value) through choice_strings_to_values: a str is its own str().
        return lambda value: (
            field.choice_strings_to_values.get(value, value)
            if type(value) is str
            else field.to_representation(value)
        )
    if method is serializers.JSONField.to_representation and not field.binary:
        return _SAME
    if method is serializers.UUIDField.to_representation and field.uuid_format == "hex_verbose":
        return str
    if method is serializers.DateTimeField.to_representation and not hasattr(field, "format"):
        return _DATETIME
    if isinstance(field, PlannedRepresentationMixin):
        return _NESTED if field.render_plan() is not None else None
    if isinstance(field, serializers.ListSerializer) and isinstance(
        field.child, PlannedRepresentationMixin
    ):
        return _MANY if field.child.render_plan() is not None else None
    return None


def _items(value: Any) -> Any:
    from django.db.models import Manager

    return value.all() if isinstance(value, Manager) else value


def _same(value: Any) -> Any:  # pragma: no cover - a marker, never called (see _render)
    return value


#: Markers of :func:`_direct` resolved per call by :func:`_writer`: the value itself (a JSON
#: field), a ``BigIntegerField``, a ``DateTimeField``, a planned nested serializer, a list of
#: one.
_SAME: Callable[[Any], Any] = _same
_BIGINT: Callable[[Any], Any] = lambda value: value  # noqa: E731
_DATETIME: Callable[[Any], Any] = lambda value: value  # noqa: E731
_NESTED: Callable[[Any], Any] = lambda value: value  # noqa: E731
_MANY: Callable[[Any], Any] = lambda value: value  # noqa: E731

#: Types a model attribute or mapping value of a row usually has: never callable, never a
#: ``PKOnlyObject``, so :func:`_render` writes them without DRF's attribute rules.
_PLAIN_TYPES = frozenset(
    {str, int, float, bool, dict, list, datetime.datetime, uuid.UUID, decimal.Decimal}
)

#: ``(utc_datetimes, bigint_as_string)``: the settings a plan's writers depend on.
_Env = tuple[bool, bool]


def _env() -> _Env:
    """The settings the writers depend on, read once per response: whether a UTC datetime is
    written as its ``isoformat()`` (ISO 8601 output, ``USE_TZ``, a UTC current time zone),
    and ``COERCE_BIGINT_TO_STRING``."""
    utc = (
        api_settings.DATETIME_FORMAT == ISO_8601
        and settings.USE_TZ
        and timezone.get_current_timezone() in _UTC_ZONES
    )
    return utc, bool(api_settings.COERCE_BIGINT_TO_STRING)


def _writer(step: _Step, env: _Env) -> Callable[[Any], Any] | None:
    """The writer of ``step`` under ``env`` (``None``: DRF's ``field.to_representation``)."""
    writer = step[2]
    field: Any = step[3]
    if writer is _DATETIME:
        if not env[0]:
            return None
        return lambda value: (
            value.isoformat()[:-6] + "Z"
            if type(value) is datetime.datetime and value.tzinfo in _UTC_ZONES
            else field.to_representation(value)
        )
    if writer is _BIGINT:
        if env[1] or hasattr(field, "coerce_to_string"):
            return None
        return lambda value: value if type(value) is int else field.to_representation(value)
    if writer is _NESTED:
        if not _plans_rows(type(field)):  # a subclass's own to_representation
            return field.to_representation  # type: ignore[no-any-return]
        return lambda value: field.represent(value, env)
    if writer is _MANY:
        child = field.child
        return lambda value: child.represent_many(_items(value), env)
    return writer


#: ``(field name, attribute, writer or None, field, optional, kept)`` of a plan under one
#: ``_Env``; ``kept``: the value types the writer returns unchanged (:func:`_kept`).
_Compiled = tuple[tuple[str, str, Callable[[Any], Any] | None, Any, bool, frozenset[type]], ...]

_NOTHING_KEPT: frozenset[type] = frozenset()


def _kept(step: _Step, writer: Callable[[Any], Any] | None) -> frozenset[type]:
    """The value types ``writer`` (:func:`_writer`'s for ``step``) writes as they are, so
    :func:`_render` stores such a value without calling it: a ``str`` for a ``CharField``, an
    ``int`` for an integer field written as a number, a ``bool`` for a ``BooleanField``, a
    ``str`` for a ``ChoiceField`` whose choices each map to themselves, every plain type for a
    ``JSONField``. Empty: the writer (or DRF's path) runs for every value."""
    if writer is None:
        return _NOTHING_KEPT
    if writer is _SAME:
        return _PLAIN_TYPES
    field: Any = step[3]
    method = type(field).to_representation
    if method is serializers.CharField.to_representation:
        return frozenset({str})
    if method in (
        serializers.IntegerField.to_representation,
        serializers.BigIntegerField.to_representation,
    ):
        return frozenset({int})
    if method is serializers.BooleanField.to_representation:
        return frozenset({bool})
    if method is serializers.ChoiceField.to_representation and all(
        type(value) is str and value == key for key, value in field.choice_strings_to_values.items()
    ):
        return frozenset({str})
    return _NOTHING_KEPT


class PlannedRepresentationMixin:
    """Render with a per-class plan of the fields (see the module's docstring); mix into a
    read-only response serializer before DRF's ``Serializer``."""

    _render_plans: dict[type, tuple[_Step, ...] | None] = {}
    #: The plans' writers under each ``_Env``: ``(cls, env) -> (plan, compiled steps)``.
    _compiled_plans: dict[tuple[type, _Env], tuple[tuple[_Step, ...], _Compiled]] = {}
    #: Fields left out of a row when their value is ``None`` (a search's ``match``; the
    #: schema lists them as optional).
    optional_fields: tuple[str, ...] = ()

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

    @classmethod
    def many_init(cls, *args: Any, **kwargs: Any) -> Any:
        """DRF's ``many=True`` serializer; DRF's own ``ListSerializer`` is replaced by
        :class:`PlannedListSerializer`, which reads the settings and the plan once per list."""
        listed = super().many_init(*args, **kwargs)  # type: ignore[misc]
        if type(listed) is serializers.ListSerializer:
            listed.__class__ = PlannedListSerializer
        return listed

    @classmethod
    def _compiled(cls, plan: tuple[_Step, ...], env: _Env) -> _Compiled:
        """The writers of ``plan`` under ``env``, built once per class and settings."""
        key = (cls, env)
        found = PlannedRepresentationMixin._compiled_plans.get(key)
        if found is not None and found[0] is plan:
            return found[1]
        optional = frozenset(cls.optional_fields)
        writers = [_writer(step, env) for step in plan]
        compiled = tuple(
            (step[0], step[1], writer, step[3], step[0] in optional, _kept(step, writer))
            for step, writer in zip(plan, writers, strict=True)
        )
        PlannedRepresentationMixin._compiled_plans[key] = (plan, compiled)
        return compiled

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
        return self.represent(instance, _env())

    def represent(self, instance: Any, env: _Env) -> Any:
        """:meth:`to_representation` with the settings ``env`` already read (a nested or
        listed row reads them once per response).

        Returns:
            The row (see :meth:`to_representation`).
        """
        plan = type(self).render_plan()
        if plan is None or self._fields_changed(plan):  # DRF's dynamic fields: DRF's own path
            data = super().to_representation(instance)  # type: ignore[misc]
            for name in self.optional_fields:
                if data.get(name) is None:
                    data.pop(name, None)
            return data
        return _render(instance, type(self)._compiled(plan, env))

    def represent_many(self, instances: Any, env: _Env) -> list[Any]:
        """Each of ``instances`` as :meth:`to_representation` writes it, the plan looked up
        once (row by row through ``to_representation`` when a subclass overrides it).

        Returns:
            The rows, in order.
        """
        plan = type(self).render_plan()
        if plan is None or self._fields_changed(plan) or not _plans_rows(type(self)):
            return [self.to_representation(instance) for instance in instances]
        compiled = type(self)._compiled(plan, env)
        return [_render(instance, compiled) for instance in instances]


class PlannedListSerializer(serializers.ListSerializer[Any]):
    """DRF's ``ListSerializer`` whose output is the child's
    :meth:`~PlannedRepresentationMixin.represent_many` (the same rows, the settings and the
    plan read once per list instead of once per row)."""

    def to_representation(self, data: Any) -> list[Any]:
        """The rows of ``data`` (a list, a queryset or a related manager).

        Returns:
            One dict per row, as the child writes it.
        """
        child: Any = self.child
        return cast(list[Any], child.represent_many(_items(data), _env()))


def _plans_rows(cls: type) -> bool:
    """Whether ``cls``'s ``to_representation`` is the mixin's (no subclass overrides it)."""
    for klass in cls.__mro__:
        if klass is PlannedRepresentationMixin:
            return True
        if "to_representation" in klass.__dict__:
            return False
    return False


def _render(instance: Any, compiled: _Compiled) -> dict[str, Any]:
    """One row from the compiled steps (see :meth:`PlannedRepresentationMixin.represent`)."""
    is_mapping = isinstance(instance, dict | Mapping)
    ret: dict[str, Any] = {}
    for name, attribute, writer, field, optional, kept in compiled:
        try:
            value = instance[attribute] if is_mapping else getattr(instance, attribute)
        except Exception:  # DRF's rules below decide (a default, SkipField, the error)
            value = _MISSING
        if type(value) in kept:  # what the writer would return unchanged
            ret[name] = value
        elif value is None:
            if not optional:
                ret[name] = None
        elif type(value) not in _PLAIN_TYPES and (  # a plain value skips DRF's checks
            value is _MISSING or callable(value) or isinstance(value, PKOnlyObject)
        ):
            try:  # DRF's own rules (defaults, SkipField, callables, related pks)
                value = field.get_attribute(instance)
            except SkipField:
                continue
            check = value.pk if isinstance(value, PKOnlyObject) else value
            if check is None:
                if not optional:
                    ret[name] = None
            else:
                ret[name] = field.to_representation(value)
        elif writer is _SAME:
            ret[name] = value
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
