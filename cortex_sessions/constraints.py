"""A unique-where constraint that every supported database enforces, and a partial index with a
chosen form where partial indexes do not exist (docs/design.md §6, §15)."""

from __future__ import annotations

from typing import Any

from django.core import checks
from django.core.exceptions import FieldDoesNotExist
from django.db.models import BaseConstraint, Index, Q, UniqueConstraint
from django.db.utils import DEFAULT_DB_ALIAS

__all__ = ["PartialIndex", "PartialUniqueConstraint"]

#: What ``PartialIndex`` runs instead of ``CREATE``/``DROP INDEX`` where it has no form: a
#: MySQL statement that does nothing (only MySQL and MariaDB lack partial indexes).
_NO_INDEX_SQL = "DO 0"


class PartialIndex(Index):
    """An index of the rows where ``where`` holds, and ``fallback_fields`` (or no index at all)
    on a database without partial indexes.

    Where the database has partial indexes (PostgreSQL, SQLite) it is exactly
    ``Index(fields=fields, condition=where, name=name)``. MySQL and MariaDB have none: Django
    would build a full index on ``fields`` (with warning ``models.W037``), which duplicates
    another index when only the condition told them apart. There it is an index on
    ``fallback_fields`` (a key that carries the condition's columns, say), or, with
    ``fallback_fields=None``, nothing — another index serves those reads. The form is chosen
    when the migration runs, by ``features.supports_partial_indexes``; migrations are the same
    on every database and ``manage.py check`` raises no ``W037`` (docs/design.md §15.3).

    Args:
        fields: the indexed fields where partial indexes exist (``-name`` for descending).
        where: a ``Q`` naming the rows indexed there.
        name: the index name, the same in every form.
        fallback_fields: the index's fields on a database without partial indexes, or
            ``None`` for no index there.
    """

    def __init__(
        self,
        *,
        fields: list[str] | tuple[str, ...],
        where: Q,
        name: str,
        fallback_fields: list[str] | tuple[str, ...] | None = None,
    ) -> None:
        if not isinstance(where, Q):
            raise ValueError("PartialIndex needs a Q condition (where=).")
        self.where = where
        self.fallback_fields = list(fallback_fields) if fallback_fields is not None else None
        super().__init__(fields=list(fields), name=name)

    def for_connection(self, connection: Any) -> Index | None:
        """The ``Index`` this becomes on ``connection``'s database, or ``None`` for none."""
        if connection.features.supports_partial_indexes:
            return Index(fields=self.fields, condition=self.where, name=self.name)
        if self.fallback_fields is None:
            return None
        return Index(fields=self.fallback_fields, name=self.name)

    def create_sql(self, model: Any, schema_editor: Any, using: str = "", **kwargs: Any) -> Any:
        index = self.for_connection(schema_editor.connection)
        if index is None:
            return _NO_INDEX_SQL
        return index.create_sql(model, schema_editor, using=using, **kwargs)

    def remove_sql(self, model: Any, schema_editor: Any, **kwargs: Any) -> Any:
        index = self.for_connection(schema_editor.connection)
        if index is None:
            return _NO_INDEX_SQL
        return index.remove_sql(model, schema_editor, **kwargs)

    def deconstruct(self) -> tuple[str, tuple[Any, ...], dict[str, Any]]:
        path, args, kwargs = super().deconstruct()
        kwargs.update(where=self.where, fallback_fields=self.fallback_fields)
        return path, tuple(args), kwargs


class PartialUniqueConstraint(BaseConstraint):
    """``fields`` are unique among the rows where ``condition`` holds, on every database.

    Where the database has partial indexes (PostgreSQL, SQLite) it is the partial unique index
    ``UNIQUE (fields) WHERE condition`` that ``UniqueConstraint(condition=…)`` makes. MySQL and
    MariaDB have none (Django would silently skip the constraint), so there it is a plain unique
    index on ``(*fields, generated_field)``, where ``generated_field`` is a ``GeneratedField`` of
    the model that is non-null exactly where ``condition`` holds: rows outside the condition all
    carry ``NULL`` and never collide, rows inside it collide on ``fields`` alone. Which form is
    built is decided when the migration runs, by the connection's
    ``features.supports_partial_indexes``; migrations and ``makemigrations`` are the same on
    every database. Model validation (``validate_constraints``) uses the partial form
    everywhere.

    Args:
        fields: the field names that must be unique together.
        condition: a ``Q`` naming the rows the rule covers.
        generated_field: name of the model's ``GeneratedField`` that is non-null exactly where
            ``condition`` holds (checked by ``manage.py check``, id ``cortex_sessions.E101``).
        name: the index name, the same in both forms.
        violation_error_code, violation_error_message: as for ``UniqueConstraint``.
    """

    def __init__(
        self,
        *,
        fields: list[str] | tuple[str, ...],
        condition: Q,
        generated_field: str,
        name: str,
        violation_error_code: str | None = None,
        violation_error_message: Any = None,
    ) -> None:
        if not fields or not isinstance(condition, Q) or not generated_field:
            raise ValueError(
                "PartialUniqueConstraint needs fields, a Q condition and a generated_field."
            )
        self.fields = tuple(fields)
        self.condition = condition
        self.generated_field = generated_field
        super().__init__(
            name=name,
            violation_error_code=violation_error_code,
            violation_error_message=violation_error_message,
        )

    def _partial(self) -> UniqueConstraint:
        return UniqueConstraint(
            fields=self.fields,
            condition=self.condition,
            name=self.name,
            violation_error_code=self.violation_error_code,
            violation_error_message=self.violation_error_message,
        )

    def _generated(self) -> UniqueConstraint:
        return UniqueConstraint(fields=[*self.fields, self.generated_field], name=self.name)

    def for_connection(self, connection: Any) -> UniqueConstraint:
        """The ``UniqueConstraint`` this becomes on ``connection``'s database."""
        if connection.features.supports_partial_indexes:
            return self._partial()
        return self._generated()

    def constraint_sql(self, model: Any, schema_editor: Any) -> Any:
        return self.for_connection(schema_editor.connection).constraint_sql(model, schema_editor)

    def create_sql(self, model: Any, schema_editor: Any) -> Any:
        return self.for_connection(schema_editor.connection).create_sql(model, schema_editor)

    def remove_sql(self, model: Any, schema_editor: Any) -> Any:
        return self.for_connection(schema_editor.connection).remove_sql(model, schema_editor)

    def validate(
        self, model: Any, instance: Any, exclude: Any = None, using: str = DEFAULT_DB_ALIAS
    ) -> None:
        self._partial().validate(model, instance, exclude=exclude, using=using)

    def _check(self, model: Any, connection: Any) -> list[checks.CheckMessage]:
        references = {(name,) for name in self.fields}
        references.update(model._get_expr_references(self.condition))
        errors: list[checks.CheckMessage] = self._check_references(model, references)  # type: ignore[attr-defined]  # Django's, not in the stubs
        try:
            field = model._meta.get_field(self.generated_field)
        except FieldDoesNotExist:
            field = None
        if field is None or not getattr(field, "generated", False):
            errors.append(
                checks.Error(
                    f"'{self.generated_field}' of constraint '{self.name}' must be a "
                    "GeneratedField of the model.",
                    hint="Declare a GeneratedField that is non-null exactly where the "
                    "condition holds.",
                    obj=model,
                    id="cortex_sessions.E101",
                )
            )
        return errors

    def deconstruct(self) -> tuple[str, tuple[Any, ...], dict[str, Any]]:
        path, args, kwargs = super().deconstruct()
        kwargs.update(
            fields=self.fields, condition=self.condition, generated_field=self.generated_field
        )
        return path, tuple(args), kwargs

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PartialUniqueConstraint):
            return (
                self.name == other.name
                and self.fields == other.fields
                and self.condition == other.condition
                and self.generated_field == other.generated_field
                and self.violation_error_code == other.violation_error_code
                and self.violation_error_message == other.violation_error_message
            )
        return super().__eq__(other)

    def __hash__(self) -> int:
        return hash((self.name, self.fields, self.generated_field))

    def __repr__(self) -> str:
        return (
            f"<{self.__class__.__name__}: fields={self.fields!r} condition={self.condition} "
            f"generated_field={self.generated_field!r} name={self.name!r}>"
        )
