"""Mentions of sessions inside message text (docs/design.md §8.2).

Grammar. An *explicit mention* is ``@[`` LABEL ``](cortex-session:`` PAYLOAD ``)``, where LABEL is
any text in which ``\\`` and ``]`` are written ``\\\\`` and ``\\]``. A *bare URI* is
``cortex-session:`` PAYLOAD not preceded by a payload character (``[A-Za-z0-9_-]``), PAYLOAD
being the longest run of payload characters, not followed by ``=``, ``+`` or ``/`` (padding or
the standard base64 alphabet make it non-canonical).

Parsing reads the text once, left to right:

- At ``@[`` the label runs to the first ``]`` not consumed by a backslash pair. If that ``]`` is
  followed by ``(cortex-session:`` the whole thing is an explicit mention and must be valid: only
  ``\\\\`` and ``\\]`` escapes in the label, a payload ended by ``)``, a canonical URI (§8.1).
  Anything else raises :class:`~cortex_sessions.references.errors.InvalidReference`.
  The earliest ``@[`` wins, so a label may itself contain ``@[`` (as ``format_mention``
  writes it).
- ``@[`` not followed that way (a Markdown link ``@[x](https://…)``, an unclosed ``@[``) is left
  alone as plain text.
- A bare URI that decodes canonically is a reference; one that does not (``cortex-session:`` in
  prose, a truncated paste) is left alone as plain text — only explicit mentions are strict.

Readable text. An explicit mention becomes ``@`` + its unescaped label; a bare URI, or a mention
with an empty label, becomes ``@`` + the session id. The references come back in order of
appearance, duplicates included (preparation removes them, §8.3).

Parsing is linear in the length of the text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .errors import InvalidReference
from .types import SessionReferenceInput
from .uri import SESSION_URI_PREFIX, decode_session_uri, encode_session_uri

__all__ = ["ParsedReferences", "format_mention", "parse_references"]

_LINK_OPEN = "(" + SESSION_URI_PREFIX
# The next mention start, or the next bare URI (not glued to a preceding payload character).
_NEXT = re.compile(r"@\[|(?<![A-Za-z0-9_-])cortex-session:[A-Za-z0-9_-]++(?![=+/])")
_LABEL_STOP = re.compile(r"[\\\]]")
_PAYLOAD_RUN = re.compile(r"[A-Za-z0-9_-]*")
_LABEL_ESCAPE = re.compile(r"\\(.)", re.DOTALL)


@dataclass(frozen=True, slots=True)
class ParsedReferences:
    """The result of :func:`parse_references`.

    Attributes:
        text: the input with every mention and bare URI replaced by its readable ``@…`` form.
        references: one :class:`SessionReferenceInput` per mention or bare URI, in order of
            appearance; ``label`` is ``None`` for a bare URI or an empty label.
    """

    text: str
    references: list[SessionReferenceInput]


def format_mention(label: str, session_id: str) -> str:
    """The mention token of a session: ``@[label](cortex-session:…)`` (docs/design.md §8.2).

    Args:
        label: display text, any ``str``; ``\\`` and ``]`` are backslash-escaped.
        session_id: the session id, encoded by :func:`~.uri.encode_session_uri`.

    Returns:
        The mention string; :func:`parse_references` gives back ``label`` and ``session_id``.

    Raises:
        InvalidReference: ``label`` is not a ``str``, or ``session_id`` cannot be encoded.
    """
    if not isinstance(label, str):
        raise InvalidReference("A mention label must be a string.")
    escaped = label.replace("\\", "\\\\").replace("]", "\\]")
    return f"@[{escaped}]({encode_session_uri(session_id)})"


def _label_end(text: str, start: int) -> int:
    """Index of the ``]`` closing a label that starts at ``start``, or ``-1`` when unclosed."""
    pos = start
    while True:
        match = _LABEL_STOP.search(text, pos)
        if match is None:
            return -1
        if match.group() == "]":
            return match.start()
        pos = match.start() + 2  # a backslash consumes the next character, whatever it is
        if pos > len(text):
            return -1


def _unescape_label(raw: str) -> str:
    def replace(match: re.Match[str]) -> str:
        if match.group(1) not in "\\]":
            raise InvalidReference(
                f"A mention label may only escape '\\' and ']', not {match.group(1)!r}."
            )
        return match.group(1)

    return _LABEL_ESCAPE.sub(replace, raw)


def parse_references(text: str) -> ParsedReferences:
    """Find the session mentions and bare session URIs in ``text`` (docs/design.md §8.2).

    See the module docstring for the exact grammar and the readable replacement text.

    Args:
        text: message text.

    Returns:
        :class:`ParsedReferences` with the readable text and the references in order.

    Raises:
        InvalidReference: ``text`` is not a ``str``, or an explicit mention is malformed: a bad
            label escape, a payload outside ``[A-Za-z0-9_-]+``, no closing ``)``, or a URI that
            is not canonical.
    """
    if not isinstance(text, str):
        raise InvalidReference("Mentions can only be parsed from a string.")
    out: list[str] = []
    references: list[SessionReferenceInput] = []
    emitted = 0  # text[:emitted] is already in ``out``
    no_mention_before = 0  # every "@[" before this index was proven not to start a mention
    pos = 0
    while (match := _NEXT.search(text, pos)) is not None:
        start = match.start()
        if match.group() != "@[":  # a bare URI
            pos = match.end()
            try:
                session_id = decode_session_uri(match.group())
            except InvalidReference:
                continue  # not canonical: plain text
            out.append(text[emitted:start])
            out.append("@" + session_id)
            references.append(SessionReferenceInput(session_id))
            emitted = pos
            continue
        pos = start + 2
        if start < no_mention_before:
            continue
        close = _label_end(text, pos)
        if close < 0:
            # Every later "@[" scans in step with this one (a backslash pair never starts at
            # "@"), so none of them closes either: only bare URIs remain.
            no_mention_before = len(text)
            continue
        if not text.startswith(_LINK_OPEN, close + 1):
            no_mention_before = close  # "@[" inside this label close at the same "]"
            continue
        payload_start = close + 1 + len(_LINK_OPEN)
        payload_end = _PAYLOAD_RUN.match(text, payload_start).end()  # type: ignore[union-attr]
        if payload_end == payload_start or not text.startswith(")", payload_end):
            raise InvalidReference(
                "A session mention must end in 'cortex-session:<base64url payload>)'."
            )
        label = _unescape_label(text[pos:close])
        session_id = decode_session_uri(text[close + 2 : payload_end])
        out.append(text[emitted:start])
        out.append("@" + (label or session_id))
        references.append(SessionReferenceInput(session_id, label or None))
        emitted = pos = payload_end + 1
    out.append(text[emitted:])
    return ParsedReferences("".join(out), references)
