"""``session_cached_resolver``: a resolver's answer kept in the login session for a while
(docs/design.md §14.5)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from cortex_sessions.api import scoping
from cortex_sessions.api.scoping import SESSION_SCOPE_KEY, session_cached_resolver
from cortex_sessions.scope import Scope, as_scope
from example_project.tenancy.resolver import org_scope_resolver

#: The example's resolver, cached in the session (named by dotted path below).
org_cached = session_cached_resolver(org_scope_resolver)


class _Session(dict):
    def __init__(self, key: str | None = "k") -> None:
        super().__init__()
        self.session_key = key


def _request(pk: int = 1, *, session: _Session | None = None, authenticated: bool = True):
    user = SimpleNamespace(pk=pk, is_authenticated=authenticated)
    return SimpleNamespace(user=user, session=_Session() if session is None else session)


@pytest.fixture
def calls():
    return []


@pytest.fixture
def resolver(calls):
    def resolve(request) -> Scope | None:
        calls.append(request.user.pk)
        return as_scope(f"org=acme/user={request.user.pk}")

    return resolve


def test_the_answer_is_reused_within_max_age_in_one_session(resolver, calls):
    cached = session_cached_resolver(resolver, max_age=60)
    session = _Session()
    first = cached(_request(1, session=session))
    second = cached(_request(1, session=session))
    assert first == second == as_scope("org=acme/user=1")
    assert calls == [1]


def test_another_user_an_expired_entry_or_no_stored_session_resolve_again(
    resolver, calls, monkeypatch
):
    cached = session_cached_resolver(resolver, max_age=60)
    session = _Session()
    cached(_request(1, session=session))
    assert cached(_request(2, session=session)) == as_scope("org=acme/user=2")
    clock = [scoping.time.time() + 61]
    monkeypatch.setattr(scoping.time, "time", lambda: clock[0])
    cached(_request(2, session=session))
    cached(_request(3, session=_Session(key=None)))  # HTTP Basic: no stored session
    cached(_request(3, authenticated=False))
    assert calls == [1, 2, 2, 3, 3]


def test_a_refusal_is_never_kept(calls):
    def refuse(request):
        calls.append(request.user.pk)

    cached = session_cached_resolver(refuse)
    session = _Session()
    assert cached(_request(1, session=session)) is None
    assert cached(_request(1, session=session)) is None
    assert calls == [1, 1]
    assert SESSION_SCOPE_KEY not in session


def test_a_negative_max_age_is_refused(resolver):
    with pytest.raises(ValueError):
        session_cached_resolver(resolver, max_age=-1)


@pytest.mark.django_db
def test_through_the_api_the_membership_is_read_once_per_max_age(
    settings, client, make_user, django_assert_num_queries
):
    settings.CORTEX_SESSIONS = {
        **settings.CORTEX_SESSIONS,
        "SCOPE_RESOLVER": f"{__name__}.org_cached",
    }
    client.force_login(make_user("bea"))
    assert client.get("/api/cortex/sessions/count/").status_code == 200
    with django_assert_num_queries(3):  # session, user, count: no membership query
        assert client.get("/api/cortex/sessions/count/").json() == {"count": 0}
