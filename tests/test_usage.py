"""Usage and token accounting (docs/design.md §16.1-§16.2): validation, the session totals
after every write that adds or removes messages (on the ORM path and PostgreSQL's one
statement), the recount, ordering, and the usage totals of a scope."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.core.management import call_command
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from cortex_sessions import services
from cortex_sessions.exceptions import InvalidFilter, InvalidInput, InvalidUsage
from cortex_sessions.models import Message, Session
from cortex_sessions.services import SessionFilters, _pg
from cortex_sessions.tokens import estimate_tokens

pytestmark = pytest.mark.django_db

SCOPE = "org=acme/user=1"


@pytest.fixture(params=["default", "orm"])
def path(request, monkeypatch):
    """The vendor's path (PostgreSQL's one statement there), and the ORM path everywhere."""
    if request.param == "orm":
        monkeypatch.setattr(_pg, "enabled", lambda alias: False)
    elif not _pg.enabled("default"):
        pytest.skip("the ORM path is the vendor's path here (the 'orm' run covers it)")
    return request.param


@pytest.fixture
def session():
    return services.create_session(scope=SCOPE, agent_id="agent")


def _usage(inp: int, out: int, cost: str, **more) -> dict:
    return {"input_tokens": inp, "output_tokens": out, "cost": cost, **more}


def _totals(session) -> tuple:
    row = Session.objects.get(pk=session.pk)
    return (row.input_tokens, row.output_tokens, row.cost, row.context_tokens)


def _tokens(text: str) -> int:
    return estimate_tokens("user", [{"type": "text", "text": text}])


def _append(session, *items):
    return services.append_messages(
        scope=session.scope, session_id=session.pk, messages=list(items)
    )


# -- validation -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "usage",
    [
        {"input_tokens": -1},
        {"input_tokens": 1.0},
        {"input_tokens": True},
        {"output_tokens": "3"},
        {"reasoning_tokens": 10**12 + 1},
        {"cost": "10000000000"},  # 10^10
        {"cached_input_tokens": None},
        {"cost": 0.5},  # a JSON number
        {"cost": "0.1234567"},  # seven decimals
        {"cost": "-1"},
        {"cost": "1e3"},
        {"cost": " 1"},
        {"cost": "01"},
        {"cost": ""},
        {"model": 5},
        {"model": "m" * 256},
        {"total_tokens": 3},  # an unknown key
        [],
        "usage",
    ],
)
def test_bad_usage_is_invalid_usage_and_writes_nothing(path, session, usage):
    good = {"role": "user", "content": "first"}
    with pytest.raises(InvalidUsage) as caught:
        _append(session, good, {"role": "assistant", "content": "hi", "usage": usage})
    assert caught.value.code == "invalid_usage"
    stored = Session.objects.get(pk=session.pk)
    assert (stored.message_count, stored.last_seq) == (0, 0)
    assert _totals(session) == (0, 0, Decimal(0), 0)


def test_good_usage_is_stored_as_given(path, session):
    usage = _usage(7, 3, "0.000042", cached_input_tokens=2, reasoning_tokens=1, model="m-1")
    result = _append(session, {"role": "assistant", "content": "hi", "usage": usage})
    assert result.messages[0].usage == usage
    assert Message.objects.get(pk=result.messages[0].pk).usage == usage
    # Every key is optional, and the largest values are accepted.
    result = _append(
        session,
        {"role": "assistant", "content": "x", "usage": {}},
        {"role": "assistant", "content": "y", "usage": {"cost": "9999999999.999999"}},
        {"role": "assistant", "content": "z", "usage": None},
    )
    assert [m.usage for m in result.messages] == [{}, {"cost": "9999999999.999999"}, None]


# -- totals after each write ------------------------------------------------------------------------


def test_append_moves_the_totals_and_returns_them(path, session):
    one = _append(session, {"role": "assistant", "content": "hello", "usage": _usage(10, 4, "0.5")})
    assert one.messages[0].token_count == _tokens("hello")
    expected = (10, 4, Decimal("0.5"), _tokens("hello"))
    assert (
        one.session.input_tokens,
        one.session.output_tokens,
        one.session.cost,
        one.session.context_tokens,
    ) == expected
    assert _totals(session) == expected
    many = _append(
        session,
        {"role": "user", "content": "question"},
        {"role": "assistant", "content": "answer", "usage": _usage(5, 6, "0.000001")},
        {"role": "tool", "content": [{"type": "tool_result", "output": "x"}]},
    )
    context = _tokens("hello") + _tokens("question") + _tokens("answer") + 4
    assert _totals(session) == (15, 10, Decimal("0.500001"), context)
    assert many.session.cost == Decimal("0.500001")
    assert many.session.context_tokens == context


def test_delete_pop_delete_after_and_clear_take_the_totals_away(path, session):
    _append(
        session,
        *(
            {"role": "assistant", "content": f"m{n}", "usage": _usage(n, 10 * n, f"0.{n}")}
            for n in range(1, 6)
        ),
    )
    each = _tokens("m1")
    assert _totals(session) == (15, 150, Decimal("1.5"), 5 * each)
    services.delete_message(scope=SCOPE, session_id=session.pk, seq=2)
    assert _totals(session) == (13, 130, Decimal("1.3"), 4 * each)
    popped = services.pop_message(scope=SCOPE, session_id=session.pk)
    assert popped.session.cost == Decimal("0.8")
    assert _totals(session) == (8, 80, Decimal("0.8"), 3 * each)
    deleted = services.delete_messages_after(scope=SCOPE, session_id=session.pk, after_seq=3)
    assert (deleted.session.input_tokens, deleted.session.context_tokens) == (4, 2 * each)
    assert _totals(session) == (4, 40, Decimal("0.4"), 2 * each)
    services.clear_messages(scope=SCOPE, session_id=session.pk)
    assert _totals(session) == (0, 0, Decimal(0), 0)


@pytest.mark.parametrize("up_to_seq", [None, 2])
def test_a_fork_has_the_totals_of_what_it_copies(session, up_to_seq):
    _append(
        session,
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "b", "usage": _usage(3, 4, "0.25")},
        {"role": "assistant", "content": "c", "usage": _usage(30, 40, "2.5")},
    )
    fork = services.fork_session(scope=SCOPE, session_id=session.pk, up_to_seq=up_to_seq)
    tokens = _tokens("a") + _tokens("b") + (_tokens("c") if up_to_seq is None else 0)
    expected = (
        (33, 44, Decimal("2.75"), tokens) if up_to_seq is None else (3, 4, Decimal("0.25"), tokens)
    )
    assert (fork.input_tokens, fork.output_tokens, fork.cost, fork.context_tokens) == expected
    assert _totals(fork) == expected
    assert _totals(session) == (33, 44, Decimal("2.75"), tokens if up_to_seq is None else 3 * 5)


# -- token counts -----------------------------------------------------------------------------------


def test_the_default_estimate_counts_the_utf8_bytes_of_the_text_blocks():
    assert estimate_tokens("user", []) == 4
    assert estimate_tokens("user", [{"type": "text", "text": "abcd"}]) == 5
    assert estimate_tokens("user", [{"type": "text", "text": "abcde"}]) == 6
    assert estimate_tokens("assistant", [{"type": "text", "text": "é"}]) == 5  # two bytes
    blocks = [
        {"type": "text", "text": "abcd"},
        {"type": "image", "url": "https://example.com/" + "x" * 400},  # not text: not counted
        {"type": "text", "text": "abcd"},
    ]
    assert estimate_tokens("user", blocks) == 6


def count_words(role, content):
    """A host's counter: one token a word."""
    return sum(len(block.get("text", "").split()) for block in content)


def returns_a_float(role, content):
    return 1.5


@override_settings(CORTEX_SESSIONS={"TOKEN_COUNTER": "tests.test_usage.count_words"})
def test_token_counter_setting_counts_every_message(path, session):
    result = _append(session, {"role": "user", "content": "three short words"})
    assert result.messages[0].token_count == 3
    assert _totals(session)[3] == 3


@override_settings(CORTEX_SESSIONS={"TOKEN_COUNTER": "tests.test_usage.returns_a_float"})
def test_a_counter_answering_no_int_refuses_the_write(path, session):
    with pytest.raises(InvalidInput, match="TOKEN_COUNTER"):
        _append(session, {"role": "user", "content": "x"})
    assert not Message.objects.filter(session=session).exists()


# -- recount ----------------------------------------------------------------------------------------


def test_recount_repairs_drifted_totals(session, capsys):
    _append(
        session,
        {"role": "assistant", "content": "hello", "usage": _usage(10, 4, "0.5")},
        {"role": "assistant", "content": "again", "usage": _usage(1, 1, "0.000001")},
    )
    right = _totals(session)
    Session.objects.filter(pk=session.pk).update(
        input_tokens=0, output_tokens=99, cost=Decimal("7"), context_tokens=1
    )
    (drift,) = services.recount_sessions(scope=SCOPE, repair=False)
    assert drift.drifted_totals == ["input_tokens", "output_tokens", "cost", "context_tokens"]
    assert tuple(drift.actual_totals) == right
    call_command("cortex_sessions_recount", "--scope", SCOPE)
    out = capsys.readouterr().out
    assert "input_tokens 0 -> 11" in out and "cost 7.000000 -> 0.500001" in out
    assert _totals(session) == right
    assert services.recount_sessions(scope=SCOPE) == []


# -- ordering ---------------------------------------------------------------------------------------


def _three_sessions():
    sessions = []
    for n, cost in enumerate(["0.2", "1.5", "0.000003"]):
        session = services.create_session(scope=SCOPE, agent_id=f"a{n}")
        _append(
            session,
            {"role": "assistant", "content": "x" * (1 + n * 40), "usage": _usage(n, 10 - n, cost)},
        )
        sessions.append(session.pk)
    return sessions


@pytest.mark.parametrize(
    ("ordering", "order"),
    [
        ("-cost", [1, 0, 2]),
        ("cost", [2, 0, 1]),
        ("input_tokens", [0, 1, 2]),
        ("-output_tokens", [0, 1, 2]),
        ("-context_tokens", [2, 1, 0]),
    ],
)
def test_lists_order_by_the_totals_with_offsets_and_cursors(ordering, order):
    ids = _three_sessions()
    listed = services.list_sessions(scope=SCOPE, ordering=ordering)
    assert [s.pk for s in listed] == [ids[n] for n in order]
    first = services.list_sessions_page(scope=SCOPE, ordering=ordering, limit=2)
    second = services.list_sessions_page(
        scope=SCOPE, ordering=ordering, limit=2, cursor=first.next_cursor
    )
    assert [s.pk for s in [*first.results, *second.results]] == [ids[n] for n in order]


# -- usage totals -----------------------------------------------------------------------------------


@pytest.fixture
def tenants():
    """Sessions in two orgs, at the org and beneath it, of two agents; one archived."""
    made = {}
    for scope, agent, usages in [
        ("org=acme", "planner", [_usage(1, 2, "0.1")]),
        ("org=acme/user=1", "coder", [_usage(10, 20, "1"), _usage(5, 5, "0.5")]),
        ("org=acme/user=1/project=x", "coder", [_usage(100, 200, "10")]),
        ("org=acme/user=2", "planner", [_usage(1000, 2000, "100")]),
        ("org=acme2", "coder", [_usage(7, 7, "7")]),  # a sibling, never in org=acme
    ]:
        session = services.create_session(scope=scope, agent_id=agent)
        _append(session, *({"role": "assistant", "content": "ok", "usage": u} for u in usages))
        made[scope] = session
    archived = services.create_session(scope="org=acme/user=2", agent_id="coder")
    _append(archived, {"role": "assistant", "content": "ok", "usage": _usage(1, 1, "1")})
    services.archive_session(scope="org=acme", session_id=archived.pk)
    return made


def test_usage_totals_sum_the_scope_with_the_list_filters(tenants):
    whole = services.usage_totals(scope="org=acme")
    ok = _tokens("ok")
    assert whole == services.UsageTotals(
        key=None,
        sessions=4,
        message_count=5,
        input_tokens=1116,
        output_tokens=2227,
        cost=Decimal("111.6"),
        context_tokens=5 * ok,
    )
    coder = services.usage_totals(scope="org=acme", filters=SessionFilters(agent_id="coder"))
    assert (coder.sessions, coder.input_tokens, coder.cost) == (2, 115, Decimal("11.5"))
    exact = services.usage_totals(scope="org=acme", filters=SessionFilters(exact=True))
    assert (exact.sessions, exact.input_tokens) == (1, 1)
    archived = services.usage_totals(scope="org=acme", filters=SessionFilters(archived=True))
    assert (archived.sessions, archived.input_tokens) == (1, 1)
    nothing = services.usage_totals(scope="org=none")
    assert (nothing.sessions, nothing.cost, nothing.context_tokens) == (0, Decimal(0), 0)


def test_usage_totals_group_by_agent_and_by_the_next_scope_level(tenants):
    by_agent = services.usage_totals(scope="org=acme", group_by="agent_id")
    assert [(g.key, g.sessions, g.input_tokens, g.cost) for g in by_agent] == [
        ("coder", 2, 115, Decimal("11.5")),
        ("planner", 2, 1001, Decimal("100.1")),
    ]
    by_scope = services.usage_totals(scope="org=acme", group_by="scope")
    assert [(g.key, g.sessions, g.input_tokens, g.output_tokens) for g in by_scope] == [
        (None, 1, 1, 2),  # stored at org=acme itself
        ("org=acme/user=1", 2, 115, 225),  # user=1 and its project
        ("org=acme/user=2", 1, 1000, 2000),
    ]
    beneath = services.usage_totals(scope="org=acme/user=1", group_by="scope")
    assert [(g.key, g.sessions) for g in beneath] == [
        (None, 1),
        ("org=acme/user=1/project=x", 1),
    ]


def test_usage_totals_is_one_statement(tenants):
    for group_by in (None, "agent_id", "scope"):
        with CaptureQueriesContext(connection) as captured:
            services.usage_totals(scope="org=acme", group_by=group_by)
        assert len(captured.captured_queries) == 1


@pytest.mark.parametrize("group_by", ["", "org", "agent", "scope ", 1])
def test_usage_totals_refuse_another_group_by(group_by):
    with pytest.raises(InvalidFilter) as caught:
        services.usage_totals(scope="org=acme", group_by=group_by)
    assert caught.value.field == "group_by"
