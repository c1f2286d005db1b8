"""A session's usage totals at the edge of their columns through the API (docs/design.md
§16.1, docs/api.md): an append or compaction that would take ``cost`` to 10^14 or a token
total past 2^63 - 1 is a 400 ``usage_total_overflow`` with nothing written, never a 500, and
the tenant's sessions read as before. The tests commit (``transaction=True``): PostgreSQL's
append runs as in production, one self-committing statement."""

from __future__ import annotations

from decimal import Decimal

import pytest

from cortex_sessions import services
from cortex_sessions.models import IdempotencyKey, Message, Session
from cortex_sessions.usage import MAX_TOTAL_COST, MAX_TOTAL_TOKENS
from tests.api.conftest import BASE, session_url

pytestmark = pytest.mark.django_db(transaction=True)

TOP_COST = "9999999999.999999"  # the largest cost one message may carry
MESSAGE = {"role": "assistant", "content": "x", "usage": {"cost": TOP_COST}}


@pytest.fixture
def session(alice_scope):
    """A session one message of the largest cost away from the bound (10,000 such appends
    would take it there)."""
    session = services.create_session(scope=alice_scope, agent_id="coder")
    services.append_messages(
        scope=alice_scope, session_id=session.pk, messages=[{"role": "user", "content": "hi"}]
    )
    Session.objects.filter(pk=session.pk).update(cost=MAX_TOTAL_COST - Decimal(TOP_COST))
    return session


def _refused(response) -> None:
    assert response.status_code == 400, response.content
    body = response.json()
    assert body["code"] == "usage_total_overflow"
    assert set(body["errors"]) == {"messages"} or set(body["errors"]) == {"usage"}


@pytest.mark.parametrize(
    ("body", "key"),
    [
        (MESSAGE, None),
        (MESSAGE, "k-1"),  # the keyed one-message append (its key recorded in the statement)
        ([MESSAGE, MESSAGE], None),
        ([{"role": "user", "content": "ok"}, MESSAGE], "k-2"),
    ],
)
def test_an_append_past_the_bound_is_400_and_the_tenant_still_reads(api, session, body, key):
    headers = {"HTTP_IDEMPOTENCY_KEY": key} if key else {}
    for _attempt in range(2):
        response = api.post(session_url(session.pk, "messages/"), body, format="json", **headers)
        _refused(response)
    assert Message.objects.filter(session=session).count() == 1
    assert not IdempotencyKey.objects.exists()
    listed = api.get(BASE)
    assert listed.status_code == 200
    stored = Session.objects.get(pk=session.pk).cost  # SQLite keeps 15 digits of it
    assert [s["cost"] for s in listed.json()["results"]] == [str(stored)]
    assert api.get(BASE + "usage/").status_code == 200
    assert api.get(session_url(session.pk)).json()["message_count"] == 1


def test_a_token_total_past_64_bits_is_400(api, session):
    Session.objects.filter(pk=session.pk).update(input_tokens=MAX_TOTAL_TOKENS)
    message = {"role": "assistant", "content": "x", "usage": {"input_tokens": 1}}
    _refused(api.post(session_url(session.pk, "messages/"), message, format="json"))
    assert Session.objects.get(pk=session.pk).input_tokens == MAX_TOTAL_TOKENS


def test_a_compaction_past_the_bound_is_400(api, session):
    body = {"through_seq": 1, "summary": "s", "usage": {"cost": TOP_COST}}
    _refused(api.post(session_url(session.pk, "compact/"), body, format="json"))
    assert Message.objects.filter(session=session).count() == 1


def test_a_keyed_append_that_fit_is_replayed_near_the_bound(api, session):
    """A client that lost the answer of a keyed append which fit gets that answer on retry,
    after the totals came near their bound, never a 400 saying nothing was written."""
    Session.objects.filter(pk=session.pk).update(cost=0)
    body = {"role": "assistant", "content": "x", "usage": {"cost": "5"}}
    headers = {"HTTP_IDEMPOTENCY_KEY": "k-replay"}
    first = api.post(session_url(session.pk, "messages/"), body, format="json", **headers)
    assert first.status_code == 201, first.content
    Session.objects.filter(pk=session.pk).update(cost=MAX_TOTAL_COST - 1)
    again = api.post(session_url(session.pk, "messages/"), body, format="json", **headers)
    assert again.status_code == 201, again.content
    assert again.json() == first.json()
    assert Message.objects.filter(session=session).count() == 2
