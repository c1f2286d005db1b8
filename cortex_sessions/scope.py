"""The scope value object: an ordered, host-defined hierarchy of ``key=value`` levels (docs/design.md §2).

A scope such as ``org=acme/project=apollo`` is stored in its canonical string form. Reads at a
scope match that scope and everything beneath it, or exactly that scope (docs/design.md §2.3); the query
predicates live in :func:`scope_q`.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from django.db.models import Q

from .conf import HARD_MAX_SCOPE_DEPTH, app_settings
from .exceptions import InvalidScope, NoScope

__all__ = [
    "MAX_CANONICAL_BYTES",
    "MAX_VALUE_CHARS",
    "Scope",
    "as_scope",
    "canonical_of",
    "scope_q",
    "user_scope_resolver",
]

KEY_RE = re.compile(r"[a-z][a-z0-9_.-]{0,63}")
#: Longest value of one level, in characters (docs/design.md §2.1).
MAX_VALUE_CHARS = 255
#: Longest canonical string, in UTF-8 bytes. The canonical string is indexed together with the
#: agent id, and PostgreSQL refuses B-tree entries over ~2,700 bytes, so a longer scope is
#: refused up front with ``InvalidScope`` instead of failing inside the database.
MAX_CANONICAL_BYTES = 1024

_ENCODE = str.maketrans({"%": "%25", "/": "%2F", "=": "%3D"})
_ESCAPED_VALUE_RE = re.compile(r"(?:[^%/=]|%25|%2F|%3D)+")
_DECODE_RE = re.compile(r"%(25|2F|3D)")
_DECODED = {"25": "%", "2F": "/", "3D": "="}


def _bad_char(value: str) -> str | None:
    """Return the first control or surrogate character of ``value``, or ``None``."""
    for char in value:
        if unicodedata.category(char) in ("Cc", "Cs"):
            return char
    return None


@dataclass(frozen=True, slots=True)
class Scope:
    """An immutable, hashable, validated scope (docs/design.md §2.1).

    Build one with :meth:`from_levels` or :meth:`parse`; the constructor is not meant to be
    called directly. ``levels`` is a tuple of ``(key, value)`` pairs, outermost first.
    """

    levels: tuple[tuple[str, str], ...]

    @classmethod
    def from_levels(cls, pairs: Iterable[tuple[str, str]]) -> Scope:
        """Build a scope from ``(key, value)`` pairs, outermost first.

        Args:
            pairs: the levels; keys match ``[a-z][a-z0-9_.-]{0,63}``, values are 1–255
                characters without control characters.

        Returns:
            The validated scope.

        Raises:
            NoScope: ``pairs`` is empty.
            InvalidScope: a key or value breaks the rules, there are more than
                ``MAX_SCOPE_DEPTH`` levels, or the canonical form exceeds 1,024 UTF-8 bytes.
        """
        levels: list[tuple[str, str]] = []
        for pair in pairs:
            if not isinstance(pair, tuple | list) or len(pair) != 2:
                raise InvalidScope(f"A scope level must be a (key, value) pair, not {pair!r}.")
            key, value = pair
            if not isinstance(key, str) or not KEY_RE.fullmatch(key):
                raise InvalidScope(
                    f"Scope key {key!r} must match [a-z][a-z0-9_.-]{{0,63}}.", key=key
                )
            if not isinstance(value, str) or not value:
                raise InvalidScope(f"Scope level {key!r} needs a non-empty value.", key=key)
            if len(value) > MAX_VALUE_CHARS:
                raise InvalidScope(
                    f"Scope value of {key!r} is {len(value)} characters; at most "
                    f"{MAX_VALUE_CHARS} are allowed.",
                    key=key,
                )
            bad = _bad_char(value)
            if bad is not None:
                raise InvalidScope(
                    f"Scope value of {key!r} contains the control character {bad!r}.", key=key
                )
            levels.append((key, value))
        if not levels:
            raise NoScope()
        max_depth = min(app_settings.MAX_SCOPE_DEPTH, HARD_MAX_SCOPE_DEPTH)
        if len(levels) > max_depth:
            raise InvalidScope(
                f"A scope has at most {max_depth} levels (MAX_SCOPE_DEPTH); got {len(levels)}.",
                depth=len(levels),
            )
        scope = cls(tuple(levels))
        size = len(scope.canonical.encode("utf-8"))
        if size > MAX_CANONICAL_BYTES:
            raise InvalidScope(
                f"The scope's canonical form is {size} UTF-8 bytes; at most "
                f"{MAX_CANONICAL_BYTES} are allowed."
            )
        return scope

    @classmethod
    def parse(cls, text: str) -> Scope:
        """Read a scope from its canonical string (docs/design.md §2.2).

        Only the canonical form is accepted: ``key=value`` levels joined by ``/``, with ``%``,
        ``/`` and ``=`` inside values written as ``%25``, ``%2F`` and ``%3D`` (upper case).

        Args:
            text: the canonical string, e.g. ``"org=acme/project=apollo"``.

        Returns:
            The scope; ``Scope.parse(s).canonical == s`` for every accepted ``s``.

        Raises:
            NoScope: ``text`` is ``None``, empty or only white space.
            InvalidScope: ``text`` is not a string or not a canonical scope.
        """
        if text is None or (isinstance(text, str) and not text.strip()):
            raise NoScope()
        if not isinstance(text, str):
            raise InvalidScope(f"A scope must be a string, not {type(text).__name__}.")
        if cls is not Scope:  # a subclass builds its own instances
            return cls._parse(text)
        return _parsed(text, app_settings.MAX_SCOPE_DEPTH)

    @classmethod
    def _parse(cls, text: str) -> Scope:
        """:meth:`parse` of a non-blank string, without the cache of :func:`_parsed`."""
        pairs = []
        for part in text.split("/"):
            key, sep, raw = part.partition("=")
            if not sep:
                raise InvalidScope(f"Scope level {part!r} is not of the form key=value.")
            if not _ESCAPED_VALUE_RE.fullmatch(raw):
                raise InvalidScope(
                    f"Scope level {part!r} has an empty value or a '%', '/' or '=' that is not "
                    "written as %25, %2F or %3D."
                )
            pairs.append((key, _DECODE_RE.sub(lambda m: _DECODED[m.group(1)], raw)))
        return cls.from_levels(pairs)

    @property
    def canonical(self) -> str:
        """The canonical string: ``key=value`` joined by ``/``, values percent-encoded."""
        return "/".join(f"{key}={value.translate(_ENCODE)}" for key, value in self.levels)

    @property
    def depth(self) -> int:
        """Number of levels."""
        return len(self.levels)

    def contains(self, other: Scope) -> bool:
        """Whether ``other`` is this scope or lies beneath it (level-wise prefix, docs/design.md §2.3)."""
        return other.levels[: len(self.levels)] == self.levels

    def child(self, key: str, value: str) -> Scope:
        """This scope with one more level appended; validated like :meth:`from_levels`."""
        return Scope.from_levels((*self.levels, (key, value)))

    def __str__(self) -> str:
        return self.canonical

    def __repr__(self) -> str:
        return f"Scope({self.canonical!r})"


@lru_cache(maxsize=1024)
def _parsed(text: str, max_depth: int) -> Scope:
    """``Scope._parse(text)``, remembered for the 1,024 scopes parsed last.

    Every service call parses its caller's scope, and a runtime sends the same few scopes over
    and over: the cache makes that a dictionary look-up. ``max_depth`` (the
    ``MAX_SCOPE_DEPTH`` in force) is part of the key, so a change of the setting is obeyed at
    once; a scope that is refused raises each time and is never remembered. Scopes are
    immutable, so callers may share one.
    """
    del max_depth  # only a key: from_levels reads the setting itself
    return Scope._parse(text)


def as_scope(value: Scope | str | None) -> Scope:
    """Coerce a ``Scope`` or canonical string to a ``Scope``.

    Raises:
        NoScope: ``value`` is ``None`` or empty (docs/design.md §2.4).
        InvalidScope: ``value`` is not a canonical scope string.
    """
    if isinstance(value, Scope):
        return value
    return Scope.parse(value)  # type: ignore[arg-type]


def canonical_of(value: Scope | str | None) -> str:
    """The canonical string of a ``Scope`` or of a canonical string, checked as
    :func:`as_scope` checks it (an accepted string is its own canonical form, §2.2).

    Raises:
        NoScope: ``value`` is ``None`` or empty (docs/design.md §2.4).
        InvalidScope: ``value`` is not a canonical scope string.
    """
    scope = as_scope(value)
    return value if type(value) is str else scope.canonical


def scope_q(scope: Scope | str | None, *, exact: bool = False, field: str = "scope") -> Q:
    """The query predicate matching rows at ``scope`` and, unless ``exact``, beneath it.

    Beneath is a level-wise prefix: ``org=acme`` matches ``org=acme/project=x`` and never
    ``org=acme2``. The prefix is a range on the canonical string (``'S/' <= scope < 'S0'``,
    ``'0'`` being the character after ``'/'``), which a B-tree index serves on both databases;
    the column uses byte-order collation so the range is exact (docs/design.md §2.3).

    The predicate is written as one range, ``'S' <= scope < 'S0'``, that the index scans, and
    inside it ``scope = 'S' OR 'S/' <= scope``, which removes siblings such as ``S-x`` that
    sort between ``S`` and ``S/``. A bare ``scope = 'S' OR (range)`` makes PostgreSQL combine
    two bitmap scans and visit the table for every row, even for a count that the index alone
    can answer.

    Raises:
        NoScope: ``scope`` is missing or empty.
        InvalidScope: ``scope`` is not a canonical scope string.
    """
    canonical = canonical_of(scope)
    at = Q(**{field: canonical})
    if exact:
        return at
    span = Q(**{f"{field}__gte": canonical, f"{field}__lt": canonical + "0"})
    return span & (at | Q(**{f"{field}__gte": canonical + "/"}))


def user_scope_resolver(request: Any) -> Scope | None:
    """Default ``SCOPE_RESOLVER``: ``user=<pk>`` for an authenticated user, else ``None`` (§2.5)."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return None
    return Scope.from_levels([("user", str(user.pk))])
