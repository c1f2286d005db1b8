"""Examples in the OpenAPI schema that the server accepts (docs/design.md §12.4), so Swagger UI's
"Try it out" sends what works instead of strings drawn from a regular expression.

- :func:`with_pattern_examples`: every string schema with a ``pattern`` gets an ``example``
  matching it, chosen by the field's or parameter's name (:data:`NAME_EXAMPLES`), else by the
  pattern (:data:`PATTERN_EXAMPLES`), else the literal of a one-value pattern (``^recall$``).
  :class:`~cortex_sessions.api.schema.CortexAutoSchema` applies it to every serializer's
  properties and every parameter, so a new field with one of these patterns is covered too.
- ``*_EXAMPLES`` lists of :class:`OpenApiExample`: request bodies each endpoint answers 2xx
  for a member of the example project's demo (``bob``, scope ``org=acme/user=2``) — a resolve
  without ``session_id``, whose default body ``"3fa85f64-…"`` named no session and was a 404.

The scope examples are the demo's ``bob``'s (README's demo table); another user's scope
differs, and a scope outside the caller's is 403 ``scope_forbidden``.
"""

from __future__ import annotations

import re
from typing import Any

from drf_spectacular.utils import OpenApiExample

from cortex_sessions.search import QUERY_PATTERN
from cortex_sessions.services.idempotency import IDEMPOTENCY_KEY_PATTERN

from .parsers import MERGE_PATCH_MEDIA_TYPE
from .serializers import AGENT_ID_PATTERN, NO_NUL_PATTERN, NOT_BLANK_PATTERN, SCOPE_PATTERN

__all__ = [
    "APPEND_EXAMPLES",
    "CREATE_EXAMPLES",
    "FORK_EXAMPLES",
    "NAME_EXAMPLES",
    "PATCH_EXAMPLES",
    "PATTERN_EXAMPLES",
    "PREPARE_EXAMPLES",
    "RESOLVE_EXAMPLES",
    "UPDATE_EXAMPLES",
    "example_for",
    "with_pattern_examples",
]

AGENT_ID = "coder"
#: The demo's ``bob`` (a member of acme): his own scope, also within alice's (acme's admin).
SCOPE = "org=acme/user=2"
QUESTION = "Why does login fail?"
ANSWER = "The session cookie is not marked Secure."

#: An example by field or parameter name; used only when it matches the schema's pattern.
NAME_EXAMPLES: dict[str, str] = {
    "agent_id": AGENT_ID,
    "scope": SCOPE,
    "X-Cortex-Scope": SCOPE,
    "Idempotency-Key": "5f0c6f0e-2d4b-4c1e-9a57-3b8f2a1d9c44",
    "title": QUESTION,
    "cwd": "/home/bob/webapp",
    "content": QUESTION,
    "type": "text",
    "text": QUESTION,
    "label": "Login bug",
    "q": "login",
    "search": "login",
    "role": "user",
}

#: An example by pattern, for a field whose name :data:`NAME_EXAMPLES` does not know.
PATTERN_EXAMPLES: dict[str, str] = {
    AGENT_ID_PATTERN: AGENT_ID,
    SCOPE_PATTERN: SCOPE,
    IDEMPOTENCY_KEY_PATTERN: NAME_EXAMPLES["Idempotency-Key"],
    NO_NUL_PATTERN: "text",
    NOT_BLANK_PATTERN: QUESTION,
    QUERY_PATTERN: "login",
}

#: A pattern that takes one string only: ``^`` + an escaped literal + ``$``.
_ONE_VALUE = re.compile(r"\^((?:\\.|[A-Za-z0-9 _])*)\$")


def example_for(name: str | None, pattern: str) -> str | None:
    """An example for a string named ``name`` that must match ``pattern`` (an ECMA-262 regular
    expression, read here with Python's ``re``, which understands the patterns the app writes).

    Args:
        name: the property or parameter name, or ``None``.
        pattern: the schema's ``pattern``.

    Returns:
        The first of: the name's example, the pattern's example, the literal of a one-value
        pattern — that matches ``pattern``; ``None`` when none does.
    """
    literal = _ONE_VALUE.fullmatch(pattern)
    candidates = [
        NAME_EXAMPLES.get(name or ""),
        PATTERN_EXAMPLES.get(pattern),
        re.sub(r"\\(.)", r"\1", literal.group(1)) if literal else None,
    ]
    for candidate in candidates:
        try:
            if candidate is not None and re.search(pattern, candidate):
                return candidate
        except re.error:  # a pattern Python cannot read: no example rather than a wrong one
            return None
    return None


def with_pattern_examples(schema: Any, name: str | None = None) -> Any:
    """``schema`` with an ``example`` on every string schema that has a ``pattern`` and no
    example, looking into ``properties`` (each under its own name), ``items`` and
    ``oneOf``/``anyOf``/``allOf`` branches (under ``name``); ``$ref``s are left alone (their
    component gets its own examples).

    Args:
        schema: a schema object (a dict; anything else is returned as is). Not modified.
        name: the name of the field or parameter the schema describes.

    Returns:
        ``schema`` itself when nothing was added, else a copy with the examples.
    """
    if not isinstance(schema, dict):
        return schema
    changed: dict[str, Any] = {}
    pattern = schema.get("pattern")
    if isinstance(pattern, str) and "example" not in schema:
        example = example_for(name, pattern)
        if example is not None:
            changed["example"] = example
    properties = schema.get("properties")
    if isinstance(properties, dict):
        described = {key: with_pattern_examples(value, key) for key, value in properties.items()}
        if any(described[key] is not properties[key] for key in properties):
            changed["properties"] = described
    if "items" in schema:
        items = with_pattern_examples(schema["items"], name)
        if items is not schema["items"]:
            changed["items"] = items
    for combinator in ("oneOf", "anyOf", "allOf"):
        branches = schema.get(combinator)
        if isinstance(branches, list):
            described_branches = [with_pattern_examples(branch, name) for branch in branches]
            if any(new is not old for new, old in zip(described_branches, branches, strict=True)):
                changed[combinator] = described_branches
    return {**schema, **changed} if changed else schema


def _body(name: str, value: Any, **kwargs: Any) -> OpenApiExample:
    return OpenApiExample(name, value=value, request_only=True, **kwargs)


RESOLVE_EXAMPLES = [
    _body(
        "The agent's default session",
        {"agent_id": AGENT_ID},
        description="Created on first use (201), the same one afterwards (200).",
    )
]

CREATE_EXAMPLES = [
    _body(
        "A new session",
        {
            "agent_id": AGENT_ID,
            "title": QUESTION,
            "metadata": {"ticket": "OPS-1"},
            "cwd": NAME_EXAMPLES["cwd"],
        },
    )
]

UPDATE_EXAMPLES = [
    _body(
        "Title, metadata and cwd",
        {"title": "Login fixed", "metadata": {"ticket": "OPS-1"}, "cwd": NAME_EXAMPLES["cwd"]},
    )
]

PATCH_EXAMPLES = [
    _body("A new title", {"title": "Login fixed"}),
    _body(
        "Merge into metadata",
        {"metadata": {"status": "solved", "ticket": None}},
        description="Sets `status`, deletes `ticket`; other keys stay.",
        media_type=MERGE_PATCH_MEDIA_TYPE,
    ),
]

FORK_EXAMPLES = [_body("A copy of every message", {"title": "Login, another approach"})]

APPEND_EXAMPLES = [
    _body("One message", {"role": "user", "content": QUESTION}),
    _body(
        "A list of messages",
        [{"role": "user", "content": QUESTION}, {"role": "assistant", "content": ANSWER}],
    ),
]

PREPARE_EXAMPLES = [
    _body(
        "No references",
        {"content": QUESTION, "references": []},
        description="Mention a session (or list one in `references`) to attach its snapshot.",
    )
]
