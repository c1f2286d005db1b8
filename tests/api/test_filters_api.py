"""The session list and count build one ``SessionFilters`` from the query parameters
(docs/design.md §7.2)."""

from __future__ import annotations

import pytest

from cortex_sessions import services
from cortex_sessions.services import SessionFilters

from .conftest import BASE


@pytest.mark.django_db
def test_the_api_builds_one_session_filters_from_the_query_parameters(
    alice, client_for, monkeypatch
):
    """The list and the count hand the services the value the FilterSet's cleaned data makes."""
    seen = []
    for name in ("session_queryset", "count_sessions"):
        original = getattr(services, name)

        def spy(*args, _original=original, **kwargs):
            seen.append(kwargs.get("filters"))
            return _original(*args, **kwargs)

        monkeypatch.setattr(services, name, spy)
    client = client_for(alice)
    query = {
        "agent_id": "coder",
        "exact": "true",
        "search": "inv",
        "archived": "any",
        "metadata": '{"team": "red"}',
        "ordering": "title",
    }

    assert client.get(BASE, query).status_code == 200
    assert client.get(f"{BASE}count/", query).status_code == 200
    expected = SessionFilters(
        agent_id="coder", exact=True, search="inv", archived=None, metadata={"team": "red"}
    )
    assert expected in seen
    assert all(filters == expected for filters in seen if filters is not None)
    assert seen.count(expected) == 2  # once for the list, once for the count
