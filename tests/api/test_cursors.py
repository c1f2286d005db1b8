"""Keyset cursors a client makes up: never a 5xx, always a page or 400 ``invalid_filter``
(docs/design.md §14.3).

A cursor is opaque, but it arrives from the client: every value one can hold — undecodable
text, JSON of the wrong shape or type, a lone surrogate, a datetime that leaves the calendar when
converted to UTC — is checked before the database sees it, on every database.
"""

from __future__ import annotations

import base64
import json
import uuid
from datetime import datetime, timedelta, timezone
from urllib.parse import parse_qs, quote, urlencode, urlsplit

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cortex_sessions import services
from tests.api.conftest import BASE

pytestmark = pytest.mark.django_db

ORDERINGS = ["created_at", "-created_at", "updated_at", "-updated_at", "title", "-title"]
ORDERINGS += ["message_count", "-message_count"]
ID = str(uuid.UUID(int=1))

#: Each example is one GET against the same rows: the fixtures are made once per test, not once
#: per example, which is what the health check warns about.
PROPERTY = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def token(data: object) -> str:
    """A cursor as the app spells one: URL-safe base64 of JSON, unpadded."""
    raw = json.dumps(data).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


@pytest.fixture
def rows(alice_scope):
    """A few sessions at alice's scope, so a cursor's comparison really runs."""
    for n in range(3):
        services.create_session(scope=alice_scope, agent_id="a", title=f"t{n}")


def assert_page_or_invalid_filter(response) -> None:
    assert response.status_code in (200, 400), (response.status_code, response.content[:300])
    assert response["Content-Type"].startswith("application/json")
    body = response.json()
    if response.status_code == 400:
        assert body["code"] == "invalid_filter", body
        assert "cursor" in body["errors"], body
    else:
        assert set(body) == {"next", "previous", "results"}


def get(api, ordering: str, cursor: str):
    return api.get(BASE, {"ordering": ordering, "cursor": cursor})


# -- the case's inputs --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ordering", "key"),
    [
        ("title", "\ud800"),
        ("-title", "a\udfffb"),
        ("-updated_at", "0001-01-01T00:00:00+14:00"),
        ("-updated_at", "9999-12-31T23:59:59-14:00"),
        ("created_at", "0001-01-01T00:00:00+00:01"),
        ("updated_at", "9999-12-31T23:59:59.999999-00:00:01"),
        # A day from the calendar's ends: a database's own time zone may move it past them.
        ("-updated_at", "0001-01-01T00:00:00+00:00"),
        ("-created_at", "9999-12-31T12:00:00+00:00"),
    ],
)
def test_a_cursor_no_database_can_compare_is_invalid_filter(api, rows, ordering, key):
    response = get(api, ordering, token({"o": ordering, "k": key, "i": ID, "d": "n"}))

    assert response.status_code == 400
    assert response.json()["code"] == "invalid_filter"


@pytest.mark.parametrize(
    "data",
    [
        {"o": "-updated_at", "k": "2026-01-01T00:00:00+00:00", "i": 5, "d": "n"},
        {"o": "-updated_at", "k": "2026-01-01T00:00:00+00:00", "i": [ID], "d": "n"},
        {"o": "-updated_at", "k": "2026-01-01T00:00:00+00:00", "i": ID, "d": ["n"]},
        {"o": ["-updated_at"], "k": "2026-01-01T00:00:00+00:00", "i": ID, "d": "n"},
        {"o": "-updated_at", "k": "2026-01-01T00:00:00+00:00", "i": "\ud800", "d": "n"},
        {"o": "-updated_at", "k": {"a": 1}, "i": ID, "d": "n"},
        {"o": "-updated_at", "k": "2026-01-01T00:00:00+00:00", "i": ID},
        {"o": "-updated_at", "k": "2026-01-01T00:00:00+00:00", "i": ID, "d": "n", "x": 1},
        {"o": "-updated_at", "k": "2026-01-01T00:00:00+00:00", "i": f"{{{ID}}}", "d": "n"},
        "a string",
        7,
        None,
    ],
)
def test_a_cursor_of_the_wrong_shape_is_invalid_filter(api, rows, data):
    response = get(api, "-updated_at", token(data))

    assert response.status_code == 400
    assert response.json()["code"] == "invalid_filter"


@pytest.mark.parametrize(
    ("ordering", "key"),
    [
        ("-updated_at", "0001-01-02T00:00:00+00:00"),
        ("updated_at", "0001-01-02T14:00:00+14:00"),
        ("-created_at", "9999-12-30T23:59:59.999999+00:00"),
        ("-updated_at", "2999-01-01T00:00:00+14:00"),
        ("-created_at", "2999-01-01T12:00:00-14:00"),
        ("title", "\U0001f600 \u00e9 \ufffd"),
    ],
)
def test_a_cursor_at_the_edge_of_the_calendar_is_a_page(api, rows, ordering, key):
    # Anything a cursor can hold that every database compares is a page, not a refusal.
    response = get(api, ordering, token({"o": ordering, "k": key, "i": ID, "d": "n"}))

    assert response.status_code == 200, response.json()
    descending = ordering.startswith("-")
    # Only rows before the key ("after" it in the list's direction) are on the page.
    future = key.startswith(("9999", "2999"))
    if ordering.lstrip("-") != "title":
        assert len(response.json()["results"]) == (3 if descending == future else 0)


def test_a_cursor_in_another_offset_reads_as_the_same_instant(api, rows):
    # The app writes cursors in UTC; the same instant in another offset is the same position.
    first = api.get(BASE, {"ordering": "-updated_at", "cursor": "", "limit": 1}).json()
    second = api.get(first["next"]).json()
    cursor = parse_qs(urlsplit(first["next"]).query)["cursor"][0]
    data = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    moved = datetime.fromisoformat(data["k"]).astimezone(timezone(timedelta(hours=-9, minutes=-30)))
    data["k"] = moved.isoformat()

    again = api.get(BASE, {"ordering": "-updated_at", "cursor": token(data), "limit": 1}).json()

    assert again["results"] == second["results"]


# -- properties: whatever a client sends --------------------------------------------------------

offsets = st.timedeltas(
    min_value=-timedelta(hours=23, minutes=59), max_value=timedelta(hours=23, minutes=59)
)
instants = st.datetimes(
    min_value=datetime(1, 1, 1),
    max_value=datetime(9999, 12, 31, 23, 59, 59, 999999),
    timezones=st.one_of(st.none(), st.builds(timezone, offsets)),
).map(datetime.isoformat)
json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=40),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=6,
)
keys = st.one_of(instants, json_values, st.text(max_size=600))
ids = st.one_of(st.uuids().map(str), st.uuids().map(lambda u: u.hex), json_values)
cursor_objects = st.fixed_dictionaries(
    {
        "o": st.one_of(st.sampled_from(ORDERINGS), json_values),
        "k": keys,
        "i": ids,
        "d": st.one_of(st.sampled_from(["n", "p"]), json_values),
    },
    optional={"x": json_values},
)


@given(st.sampled_from(ORDERINGS), st.one_of(cursor_objects, json_values))
@PROPERTY
def test_any_json_in_a_cursor_is_a_page_or_invalid_filter(api, rows, ordering, data):
    if isinstance(data, dict) and "o" in data and isinstance(data["o"], str):
        data["o"] = ordering  # mostly the list's own ordering, so the key reaches the check
    assert_page_or_invalid_filter(get(api, ordering, token(data)))


@given(st.sampled_from(ORDERINGS), st.binary(max_size=300))
@PROPERTY
def test_any_bytes_in_a_cursor_are_a_page_or_invalid_filter(api, rows, ordering, raw):
    # Bytes that are no UTF-8, or UTF-8 that is no JSON, encoded as a cursor would be.
    cursor = base64.urlsafe_b64encode(raw).decode().rstrip("=")
    assert_page_or_invalid_filter(get(api, ordering, cursor))


@given(st.sampled_from(ORDERINGS), st.binary(max_size=300))
@PROPERTY
def test_any_query_string_bytes_in_a_cursor_are_a_page_or_invalid_filter(api, rows, ordering, raw):
    # The parameter itself as raw, percent-encoded bytes: not base64, not UTF-8, NUL, anything.
    query = urlencode({"ordering": ordering}) + "&cursor=" + quote(raw, safe="")
    assert_page_or_invalid_filter(api.get(f"{BASE}?{query}"))
