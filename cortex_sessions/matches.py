"""Why a search result matched: the :class:`SearchMatch` value and its snippets (docs/design.md §11.5).

Pure values and functions, no database access: :mod:`cortex_sessions.models` reads a row's
``search_hit`` annotation through :func:`match_of`, and :mod:`cortex_sessions.search` (which builds
the queries that annotate rows) uses the marks below; neither imports the other for them, so
``models`` never imports ``search``.

Snippets are safe to insert as HTML: the text is HTML-escaped and each hit wrapped in
``<mark>…</mark>``, the only markup a snippet holds.
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass
from typing import Any

__all__ = [
    "SNIPPET_CONTEXT_CHARS",
    "START_MARK",
    "STOP_MARK",
    "SearchMatch",
    "marked_html",
    "match_of",
    "substring_snippet",
]

#: Characters of context on each side of the hit in a SQLite snippet.
SNIPPET_CONTEXT_CHARS = 60

#: Private-use characters that mark a hit inside the database's snippet before it is escaped;
#: removed from the text first, so a message cannot forge a mark.
START_MARK, STOP_MARK = "\ue000", "\ue001"


@dataclass(frozen=True)
class SearchMatch:
    """Why a session or message matched a query (docs/design.md §11.5).

    Attributes:
        snippet: a short passage of the best-matching text, HTML-escaped, each hit wrapped in
            ``<mark>…</mark>`` (the only markup it holds); the title's when only the title
            matched.
        seq: the ``seq`` of the message the snippet comes from; ``None`` for a title match.
        rank: relevance, higher is better (PostgreSQL ``ts_rank``; the session's is its best
            message's or its title's, whichever is higher); ``None`` on SQLite, which does not
            rank.
    """

    snippet: str
    seq: int | None
    rank: float | None

    def as_dict(self) -> dict[str, Any]:
        """``{"snippet", "seq", "rank"}``."""
        return {"snippet": self.snippet, "seq": self.seq, "rank": self.rank}


def marked_html(text: str) -> str:
    """HTML-escape a snippet whose hits are wrapped in :data:`START_MARK`/:data:`STOP_MARK`,
    then turn the marks into ``<mark>``/``</mark>``."""
    return html.escape(text).replace(START_MARK, "<mark>").replace(STOP_MARK, "</mark>")


def substring_snippet(text: str, q: str) -> str:
    """A snippet of ``text`` around the first case-insensitive occurrence of ``q`` (ASCII
    letters folded, as SQLite's ``lower()`` which found it), the occurrence marked and at most
    :data:`SNIPPET_CONTEXT_CHARS` characters kept on each side (``…`` where cut)."""
    text = text.replace(START_MARK, "").replace(STOP_MARK, "")
    at = _ascii_lower(text).find(_ascii_lower(q))
    if at < 0:
        return marked_html(text[: 2 * SNIPPET_CONTEXT_CHARS])
    start, end = max(0, at - SNIPPET_CONTEXT_CHARS), at + len(q) + SNIPPET_CONTEXT_CHARS
    head = ("…" if start else "") + text[start:at]
    tail = text[at + len(q) : end] + ("…" if end < len(text) else "")
    return marked_html(f"{head}{START_MARK}{text[at : at + len(q)]}{STOP_MARK}{tail}")


def _ascii_lower(text: str) -> str:
    return text.translate(_ASCII_LOWER)


_ASCII_LOWER = {code: code + 32 for code in range(ord("A"), ord("Z") + 1)}


def match_of(hit: Any, rank: Any = None) -> SearchMatch | None:
    """The :class:`SearchMatch` of a ``search_hit`` annotation (``None`` without one).

    Args:
        hit: the annotation's JSON object (a dict, or its text).
        rank: the row's ``search_rank`` when it has one (the session's rank wins over the
            hit's own).

    Returns:
        The match, ``rank`` rounded to 6 decimals; ``None`` when ``hit`` is not an object.

    Raises:
        json.JSONDecodeError: ``hit`` is text that is not JSON (never from the database's
            own annotation).
    """
    if isinstance(hit, str):
        hit = json.loads(hit)
    if not isinstance(hit, dict):
        return None
    if "text" in hit:
        snippet = substring_snippet(str(hit["text"] or ""), str(hit["q"]))
    else:
        snippet = marked_html(str(hit.get("snippet") or ""))
    if rank is None:
        rank = hit.get("rank")
    seq = hit.get("seq")
    return SearchMatch(
        snippet=snippet,
        seq=None if seq is None else int(seq),
        rank=None if rank is None else round(float(rank), 6),
    )
