"""The ``X-Cortex-Consistency-Token`` header (docs/design.md §17.2): every response names the
position the client's writes end at (PostgreSQL), a request sent with a token answers at least
that token, and the schema documents the header."""

from __future__ import annotations

import pytest
from django.db import connection

from cortex_sessions.consistency import TOKEN_HEADER, parse_lsn

from .conftest import BASE
from .test_schema import schema_document  # noqa: F401 - fixture

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def replica_router(settings):
    """Writes are remembered by ``ReplicaRouter`` (here with no replica: every read on the
    primary, the tokens named all the same)."""
    settings.DATABASE_ROUTERS = ["cortex_sessions.routers.ReplicaRouter"]


def test_a_write_answers_with_the_position_it_ends_at(api):
    created = api.post(BASE, {"agent_id": "coder"}, format="json")
    assert created.status_code == 201
    if connection.vendor != "postgresql":
        assert TOKEN_HEADER not in created  # no WAL position to name
        return
    first = parse_lsn(created[TOKEN_HEADER])
    appended = api.post(
        f"{BASE}{created.data['id']}/messages/",
        [{"role": "user", "content": "hi"}],
        format="json",
        HTTP_X_CORTEX_CONSISTENCY_TOKEN=created[TOKEN_HEADER],
    )
    assert appended.status_code == 201
    assert parse_lsn(appended[TOKEN_HEADER]) > first


def test_a_read_answers_the_token_it_was_sent(api):
    response = api.get(BASE, HTTP_X_CORTEX_CONSISTENCY_TOKEN="0/10")
    assert response.status_code == 200
    assert response[TOKEN_HEADER] == "0/10"


def test_a_read_without_a_token_or_with_a_malformed_one_answers_none(api):
    assert TOKEN_HEADER not in api.get(BASE)
    malformed = api.get(BASE, HTTP_X_CORTEX_CONSISTENCY_TOKEN="not-a-position")
    assert malformed.status_code == 200
    assert TOKEN_HEADER not in malformed


@pytest.mark.postgres_only
def test_under_atomic_requests_the_token_is_named_after_the_commit(api, monkeypatch):
    monkeypatch.setitem(connection.settings_dict, "ATOMIC_REQUESTS", True)
    created = api.post(BASE, {"agent_id": "coder"}, format="json")
    assert created.status_code == 201
    assert parse_lsn(created[TOKEN_HEADER]) > 0


def test_the_schema_documents_the_header_both_ways(schema_document):  # noqa: F811
    operation = schema_document["paths"]["/api/cortex/sessions/"]["get"]
    assert TOKEN_HEADER in {p["name"] for p in operation["parameters"] if p["in"] == "header"}
    assert TOKEN_HEADER in operation["responses"]["200"]["headers"]
