"""Keyset (cursor) pagination of session lists (docs/design.md §14)."""

from __future__ import annotations

import base64
import json
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from cortex_sessions import services
from cortex_sessions.exceptions import InvalidFilter
from cortex_sessions.models import Session
from cortex_sessions.services import list_sessions_page

pytestmark = pytest.mark.django_db

SCOPE = "org=acme"


@pytest.fixture
def sessions():
    """23 sessions with many equal sort keys: 4 distinct updated_at values, 3 titles, 2 counts."""
    moment = timezone.now()
    rows = [
        Session(
            agent_id="a",
            scope=f"{SCOPE}/user=u{n % 3}",
            title=f"t{n % 3}",
            message_count=n % 2,
            updated_at=moment - timedelta(seconds=n % 4),
            created_at=moment - timedelta(seconds=n % 4),
        )
        for n in range(23)
    ]
    Session.objects.bulk_create(rows)
    Session.objects.create(agent_id="a", scope="org=other", title="t0")
    return rows


def walk(limit, **kwargs):
    """Every page forward from the first; returns the pages' ids."""
    pages, cursor = [], None
    while True:
        page = list_sessions_page(scope=SCOPE, limit=limit, cursor=cursor, **kwargs)
        pages.append([s.pk for s in page.results])
        cursor = page.next_cursor
        if cursor is None:
            return pages, page


@pytest.mark.parametrize("ordering", [None, *services.ORDERING_FIELDS, "-title", "-created_at"])
@pytest.mark.parametrize("limit", [1, 4, 7, 50])
def test_walking_forward_lists_every_session_once_in_list_order(sessions, ordering, limit):
    pages, _ = walk(limit, ordering=ordering)
    expected = [s.pk for s in services.list_sessions(scope=SCOPE, ordering=ordering)]
    assert [pk for page in pages for pk in page] == expected
    assert all(len(page) == limit for page in pages[:-1])


@pytest.mark.parametrize("ordering", [None, "title", "-message_count"])
def test_walking_back_with_previous_gives_the_same_pages(sessions, ordering):
    pages, last = walk(4, ordering=ordering)
    back, cursor = [], last.previous_cursor
    while cursor is not None:
        page = list_sessions_page(scope=SCOPE, limit=4, cursor=cursor, ordering=ordering)
        back.append([s.pk for s in page.results])
        cursor = page.previous_cursor
    assert list(reversed(back)) == pages[:-1]


def test_first_page_has_no_previous_and_last_page_no_next(sessions):
    first = list_sessions_page(scope=SCOPE, limit=10)
    assert first.previous_cursor is None and first.next_cursor is not None
    assert list_sessions_page(scope=SCOPE, limit=100).next_cursor is None
    assert list_sessions_page(scope="org=none", limit=10).results == []


def test_a_page_is_one_query_whatever_the_position(sessions):
    page = list_sessions_page(scope=SCOPE, limit=3)
    for _ in range(4):
        with CaptureQueriesContext(connection) as captured:
            page = list_sessions_page(scope=SCOPE, limit=3, cursor=page.next_cursor)
        assert len(captured.captured_queries) == 1
        assert "OFFSET" not in captured.captured_queries[0]["sql"]


def test_a_session_moved_by_an_append_while_paging_is_not_repeated(sessions):
    first = list_sessions_page(scope=SCOPE, limit=5)
    moved = list_sessions_page(scope=SCOPE, limit=5, cursor=first.next_cursor).results[0]
    services.append_messages(
        scope=SCOPE, session_id=moved.pk, messages=[{"role": "user", "content": "x"}]
    )
    seen = [s.pk for s in first.results]
    cursor = first.next_cursor
    while cursor:
        page = list_sessions_page(scope=SCOPE, limit=5, cursor=cursor)
        seen += [s.pk for s in page.results]
        cursor = page.next_cursor
    assert len(seen) == len(set(seen))  # moved to the top: not seen again, nothing else lost
    assert set(seen) | {moved.pk} == {s.pk for s in services.list_sessions(scope=SCOPE)}


def _token(data) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")


ID = "0" * 32
AT = "2026-01-01T00:00:00+00:00"


@pytest.mark.parametrize(
    ("cursor", "ordering"),
    [
        ("", None),
        ("not-a-cursor", None),
        ("%%%", None),
        ("x" * 5000, None),
        (_token([1, 2]), None),
        (_token({"o": "-updated_at", "k": "yesterday", "i": ID, "d": "n"}), None),
        (_token({"o": "-updated_at", "k": "2026-01-01T00:00:00", "i": ID, "d": "n"}), None),
        (_token({"o": "-updated_at", "k": AT, "i": "nope", "d": "n"}), None),
        (_token({"o": "-updated_at", "k": AT, "i": ID, "d": "x"}), None),
        (_token({"o": "title", "k": "t1", "i": ID, "d": "n"}), None),  # another ordering
        (_token({"o": "title", "k": 5, "i": ID, "d": "n"}), "title"),
        (_token({"o": "title", "k": "a\x00", "i": ID, "d": "n"}), "title"),
        (_token({"o": "message_count", "k": "1", "i": ID, "d": "n"}), "message_count"),
        (_token({"o": "message_count", "k": -1, "i": ID, "d": "n"}), "message_count"),
        (_token({"o": "message_count", "k": True, "i": ID, "d": "n"}), "message_count"),
        (_token({"o": "message_count", "k": 2**63, "i": ID, "d": "n"}), "message_count"),
    ],
)
def test_a_bad_cursor_is_invalid_filter(sessions, cursor, ordering):
    with pytest.raises(InvalidFilter) as caught:
        list_sessions_page(scope=SCOPE, limit=5, cursor=cursor, ordering=ordering)
    assert caught.value.field == "cursor"


@pytest.mark.parametrize("limit", [0, -1, "5", 2**63])
def test_a_bad_limit_is_invalid_filter(sessions, limit):
    with pytest.raises(InvalidFilter):
        list_sessions_page(scope=SCOPE, limit=limit)
