"""Model fields of the app: strings compared exactly, byte for byte, on every database."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.db import models

from .scope import MAX_CANONICAL_BYTES

if TYPE_CHECKING:
    _CharField = models.CharField[str, str]
else:  # Django's model fields are not subscriptable at run time
    _CharField = models.CharField


__all__ = ["ExactCharField", "ScopeField", "exact_collation"]


def exact_collation(connection: Any, *, ascii: bool = False) -> str | None:
    """The column collation under which equal strings are equal code point for code point.

    PostgreSQL and SQLite compare text exactly already (``None``: the column keeps the
    database's own). MySQL and MariaDB default to case- and accent-folding collations, and their
    ``utf8mb4_bin`` still ignores trailing spaces (``'bot ' = 'bot'``), so the column gets a
    binary *no-pad* collation: ``utf8mb4_nopad_bin`` on MariaDB, ``utf8mb4_0900_bin`` on MySQL 8
    (docs/design.md §15).

    Args:
        connection: a Django database connection (``connection.vendor`` is read; on MySQL the
            server kind, which may open the connection).
        ascii: the column holds ASCII only: one byte a character in the index instead of four
            (``ascii_nopad_bin`` on MariaDB; ``ascii_bin`` on MySQL 8, which pads trailing
            spaces, so use it for values that cannot end in one).

    Returns:
        The collation name, or ``None`` for the database's default.
    """
    if connection.vendor != "mysql":
        return None
    mariadb = connection.mysql_is_mariadb
    if ascii:
        return "ascii_nopad_bin" if mariadb else "ascii_bin"
    return "utf8mb4_nopad_bin" if mariadb else "utf8mb4_0900_bin"


class ExactCharField(_CharField):
    """A ``CharField`` compared exactly: no case or accent folding, trailing spaces significant.

    For identifiers that the app matches on (``agent_id``, an imported conversation's id), so
    that ``"Bot"``, ``"bot"`` and ``"bot "`` are three agents on every database. Only MySQL and
    MariaDB need a column collation for it (:func:`exact_collation`); it is chosen per
    connection and never written into migrations (docs/design.md §15).

    Args:
        ascii: the values are ASCII only (checked by the code that writes them); on MySQL the
            column is then ASCII, a quarter of the index key bytes of ``utf8mb4``.
        Any other argument: as for ``CharField``.
    """

    def __init__(self, *args: Any, ascii: bool = False, **kwargs: Any) -> None:
        self.ascii = ascii
        super().__init__(*args, **kwargs)

    def deconstruct(self) -> Any:
        name, path, args, kwargs = super().deconstruct()
        if self.ascii:
            kwargs["ascii"] = True
        return name, path, args, kwargs

    def db_parameters(self, connection: Any) -> dict[str, Any]:
        params = super().db_parameters(connection)
        collation = exact_collation(connection, ascii=self.ascii)
        if collation:
            params["collation"] = collation
        return params


class ScopeField(_CharField):
    """A canonical scope string (docs/design.md §2.2), compared byte-wise.

    Prefix matching is a range on the canonical string (see ``scope.scope_q``); that range is
    only exact under byte-order collation, so the column gets ``COLLATE "C"`` on PostgreSQL
    (SQLite compares bytes already). On MySQL and MariaDB it is ``VARBINARY(1024)``: binary
    order, trailing spaces significant, and 1,024 bytes of index key — a ``VARCHAR(1024)`` in
    ``utf8mb4`` would need 4,096, over InnoDB's 3,072-byte limit, and ``utf8mb4_bin`` pads
    trailing spaces, so ``org=a`` and ``org=a `` would collide. The column type is chosen per
    connection and never written into migrations, which stay database-independent
    (docs/design.md §15).
    """

    description = "Canonical scope"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("max_length", MAX_CANONICAL_BYTES)
        super().__init__(*args, **kwargs)

    def db_type(self, connection: Any) -> str | None:
        if connection.vendor == "mysql":
            # Canonical scopes are capped in UTF-8 bytes, so bytes are the right unit here.
            return f"varbinary({MAX_CANONICAL_BYTES})"
        return super().db_type(connection)

    def db_parameters(self, connection: Any) -> dict[str, Any]:
        params = super().db_parameters(connection)
        if connection.vendor == "postgresql":
            params["collation"] = "C"
        return params

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> Any:
        """Decode the bytes MySQL drivers return for a ``VARBINARY`` column to ``str``."""
        if isinstance(value, bytes | bytearray | memoryview):
            return bytes(value).decode("utf-8")
        return value
