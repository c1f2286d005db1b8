"""A session's usage totals at the edge of their columns (docs/design.md §16.1): an append,
keyed or not, of one message or many, on PostgreSQL's one statement and on the ORM path, a
compaction, and an adapter's append that would take ``cost`` to 10^14 (on SQLite
99999999999999.9) or a token total past 2^63 - 1 is refused with ``usage_total_overflow`` and
writes nothing; the session reads back as before.

Ten thousand messages of the largest cost take a session there; the tests set a total near
its bound with a queryset update instead, then append. They commit (``transaction=True``), so
PostgreSQL's append runs as it does in production: one self-committing statement.
"""

from __future__ import annotations

from decimal import Context, Decimal

import pytest
from django.db import connection, transaction

from cortex_sessions import services
from cortex_sessions.exceptions import InvalidUsage, UsageTotalOverflow
from cortex_sessions.models import IdempotencyKey, Message, Session
from cortex_sessions.services import _pg
from cortex_sessions.usage import MAX_TOTAL_COST, MAX_TOTAL_TOKENS, SQLITE_MAX_TOTAL_COST
from tests.test_usage import path  # noqa: F401  (the fixture: the vendor's path and the ORM's)

pytestmark = pytest.mark.django_db(transaction=True)

SCOPE = "org=acme/user=1"
TOP_COST = "9999999999.999999"  # the largest cost one message may carry


def _limit() -> Decimal:
    """The bound a session's ``cost`` stays below on this database."""
    return SQLITE_MAX_TOTAL_COST if connection.vendor == "sqlite" else MAX_TOTAL_COST


def _unit() -> Decimal:
    """The smallest cost step the database keeps near the bound (SQLite: its 15 digits)."""
    return Decimal("0.1") if connection.vendor == "sqlite" else Decimal("0.000001")


def _session(**totals) -> Session:
    """A session with a message, its totals then set to ``totals`` (as 10,000 appends would)."""
    session = services.create_session(scope=SCOPE, agent_id="agent")
    services.append_messages(
        scope=SCOPE, session_id=session.pk, messages=[{"role": "user", "content": "hi"}]
    )
    Session.objects.filter(pk=session.pk).update(**totals)
    return Session.objects.get(pk=session.pk)


def _message(**usage) -> dict:
    return {"role": "assistant", "content": "x", "usage": usage}


def _state(session: Session) -> tuple:
    """What a refused write must leave as it was."""
    row = Session.objects.get(pk=session.pk)
    totals = (row.input_tokens, row.output_tokens, row.cost, row.context_tokens)
    return row.message_count, row.last_seq, totals, Message.objects.count()


def _refused(write, session: Session, *, field: str = "messages") -> UsageTotalOverflow:
    before = _state(session)
    with pytest.raises(UsageTotalOverflow) as caught:
        write()
    assert caught.value.code == "usage_total_overflow"
    assert isinstance(caught.value, InvalidUsage)
    assert caught.value.field == field
    assert _state(session) == before
    return caught.value


@pytest.mark.parametrize("count", [1, 3])
@pytest.mark.usefixtures("path")
def test_an_append_taking_cost_to_its_bound_is_refused_and_writes_nothing(count):
    session = _session(cost=_limit() - _unit() * count)
    _refused(
        lambda: services.append_messages(
            scope=SCOPE, session_id=session.pk, messages=[_message(cost=str(_unit()))] * count
        ),
        session,
    )


def _kept(value: Decimal) -> Decimal:
    """``value`` as the database keeps it: on SQLite 15 significant digits (its float)."""
    if connection.vendor == "sqlite":
        value = Context(prec=15).create_decimal(value)
    return value.quantize(Decimal("0.000001"))


@pytest.mark.usefixtures("path")
def test_an_append_stopping_just_below_the_bound_is_written_and_reads_back():
    below = _limit() - _unit()
    session = _session(cost=below - Decimal(TOP_COST))
    result = services.append_messages(
        scope=SCOPE, session_id=session.pk, messages=[_message(cost=TOP_COST)]
    )
    assert _kept(result.session.cost) == below
    assert Session.objects.get(pk=session.pk).cost == below
    assert services.get_session(scope=SCOPE, session_id=session.pk).cost == below
    assert [s.pk for s in services.list_sessions(scope=SCOPE)] == [session.pk]
    assert services.usage_totals(scope=SCOPE).cost == below


@pytest.mark.usefixtures("path")
def test_the_tenant_still_reads_after_a_refused_append():
    """The defect: on SQLite the float column stored 10^14 and every read of the tenant's
    sessions then failed converting it."""
    session = _session(cost=MAX_TOTAL_COST - Decimal(TOP_COST))
    messages = [_message(cost=TOP_COST)] * 2
    for _attempt in range(2):
        _refused(
            lambda: services.append_messages(scope=SCOPE, session_id=session.pk, messages=messages),
            session,
        )
    listed = services.list_sessions(scope=SCOPE)
    assert [s.cost for s in listed] == [_kept(MAX_TOTAL_COST - Decimal(TOP_COST))]
    assert services.usage_totals(scope=SCOPE).sessions == 1


@pytest.mark.parametrize("total", ["input_tokens", "output_tokens"])
@pytest.mark.usefixtures("path")
def test_an_append_taking_a_token_total_past_64_bits_is_refused(total):
    session = _session(**{total: MAX_TOTAL_TOKENS - 5})
    _refused(
        lambda: services.append_messages(
            scope=SCOPE, session_id=session.pk, messages=[_message(**{total: 6})]
        ),
        session,
    )
    services.append_messages(scope=SCOPE, session_id=session.pk, messages=[_message(**{total: 5})])
    assert getattr(Session.objects.get(pk=session.pk), total) == MAX_TOTAL_TOKENS


@pytest.mark.usefixtures("path")
def test_an_append_taking_context_tokens_past_64_bits_is_refused():
    session = _session(context_tokens=MAX_TOTAL_TOKENS - 1)
    _refused(
        lambda: services.append_messages(
            scope=SCOPE, session_id=session.pk, messages=[{"role": "user", "content": "x"}]
        ),
        session,
    )


@pytest.mark.parametrize("count", [1, 2])
@pytest.mark.usefixtures("path")
def test_a_keyed_append_is_refused_without_recording_its_key(count):
    session = _session(cost=MAX_TOTAL_COST - Decimal(TOP_COST))

    def append():
        return services.append_messages(
            scope=SCOPE,
            session_id=session.pk,
            messages=[_message(cost=TOP_COST)] * count,
            idempotency_key="k-1",
        )

    _refused(append, session)
    assert not IdempotencyKey.objects.exists()
    # The key is free: once the session has room, the same call is written.
    Session.objects.filter(pk=session.pk).update(cost=0)
    assert len(append().messages) == count


@pytest.mark.parametrize("count", [1, 2])
@pytest.mark.parametrize("total", ["cost", "input_tokens", "context_tokens"])
@pytest.mark.usefixtures("path")
def test_a_replay_of_a_keyed_append_that_fit_answers_the_first_call_near_the_bound(count, total):
    """The first call fit; the totals then came near their bound. Its replay is the first
    call's answer, not a refusal saying nothing was written (on PostgreSQL the one statement
    meets the total's bound before the key's index, and hands the call to ``run_once``)."""
    session = _session()
    messages = [_message(cost="5", input_tokens=5)] * count

    def append():
        return services.append_messages(
            scope=SCOPE, session_id=session.pk, messages=messages, idempotency_key="k-2"
        )

    first = append()
    near = {"cost": _limit() - 1, "input_tokens": MAX_TOTAL_TOKENS - 1}
    Session.objects.filter(pk=session.pk).update(**{total: near.get(total, MAX_TOTAL_TOKENS - 1)})
    again = append()
    assert [m.pk for m in again.messages] == [m.pk for m in first.messages]
    assert Message.objects.filter(session=session).count() == 1 + count  # _session's and these


@pytest.mark.usefixtures("path")
def test_a_refused_append_inside_a_callers_transaction():
    """The host's own ``atomic()`` around the append: the refusal rolls back the savepoint it
    gave the append, and the host's transaction goes on."""
    session = _session(cost=MAX_TOTAL_COST - Decimal(TOP_COST))
    with transaction.atomic():
        services.update_session(scope=SCOPE, session_id=session.pk, title="kept")
        with pytest.raises(UsageTotalOverflow), transaction.atomic():
            services.append_messages(
                scope=SCOPE, session_id=session.pk, messages=[_message(cost=TOP_COST)]
            )
        services.append_messages(scope=SCOPE, session_id=session.pk, messages=[_message(cost="1")])
    row = Session.objects.get(pk=session.pk)
    assert (row.title, row.message_count) == ("kept", 2)


def test_a_refused_append_caught_inside_the_callers_block_marks_it_for_rollback():
    """PostgreSQL's one statement failed in the host's transaction, which the database
    aborted: the block is marked for rollback, so the next query says so in Django's words."""
    if not _pg.enabled("default"):
        pytest.skip("the ORM path refuses before writing: the block stays usable")
    session = _session(cost=MAX_TOTAL_COST - Decimal(TOP_COST))
    with transaction.atomic():
        with pytest.raises(UsageTotalOverflow):
            services.append_messages(
                scope=SCOPE, session_id=session.pk, messages=[_message(cost=TOP_COST)]
            )
        assert transaction.get_rollback()
    assert _state(session)[0] == 1


def test_a_compaction_whose_usage_overflows_is_refused():
    session = _session(cost=MAX_TOTAL_COST - Decimal(TOP_COST))
    _refused(
        lambda: services.compact_session(
            scope=SCOPE,
            session_id=session.pk,
            through_seq=1,
            summary="summary",
            usage={"cost": TOP_COST},
        ),
        session,
        field="usage",
    )


def test_an_adapters_append_is_refused():
    """The adapters append through the services (LangChain's ``append_built``)."""
    pytest.importorskip("langchain_core")
    from langchain_core.messages import HumanMessage

    from cortex_sessions.integrations.langchain import CortexChatMessageHistory

    session = _session(context_tokens=MAX_TOTAL_TOKENS)
    history = CortexChatMessageHistory(scope=SCOPE, agent_id="agent", session_id=session.pk)
    _refused(lambda: history.add_messages([HumanMessage("x")]), session)


def test_a_langgraph_put_mirroring_past_the_bound_is_refused():
    """LangGraph's saver mirrors messages in its own statement on PostgreSQL (§19.1)."""
    pytest.importorskip("langgraph")
    from langchain_core.messages import HumanMessage
    from langgraph.checkpoint.base import empty_checkpoint

    from cortex_sessions.integrations.langgraph import CortexCheckpointSaver
    from cortex_sessions.integrations.langgraph.models import Checkpoint

    saver = CortexCheckpointSaver(scope=SCOPE, agent_id="agent")
    session = _session(context_tokens=MAX_TOTAL_TOKENS)
    config = {"configurable": {"thread_id": str(session.pk), "checkpoint_ns": ""}}
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {"messages": [HumanMessage("x", id="x")]}
    version = saver.get_next_version(None, None)
    checkpoint["channel_versions"] = {"messages": version}
    _refused(lambda: saver.put(config, checkpoint, {"step": 1}, {"messages": version}), session)
    assert not Checkpoint.objects.exists()


def test_the_tenants_totals_may_pass_one_sessions_bound():
    """``GET /sessions/usage/`` sums sessions: its total is not a session's column."""
    near = _limit() - Decimal(TOP_COST)
    sessions = [_session(cost=near) for _ in range(2)]
    totals = services.usage_totals(scope=SCOPE)
    assert totals.sessions == 2
    assert totals.cost == _kept(2 * _kept(near))
    ordered = services.list_sessions(scope=SCOPE, ordering="-cost")
    assert {s.pk for s in ordered} == {s.pk for s in sessions}


@pytest.mark.parametrize("group_by", [None, "agent_id", "scope"])
def test_the_tenants_token_totals_may_pass_64_bits(group_by):
    """Two sessions, each at the token totals' bound: the roll-up reads (SQLite's integer
    ``SUM`` raised "integer overflow" there, a 500 through the API)."""
    for _ in range(2):
        _session(
            input_tokens=MAX_TOTAL_TOKENS,
            output_tokens=MAX_TOTAL_TOKENS,
            context_tokens=MAX_TOTAL_TOKENS,
        )
    totals = services.usage_totals(scope="org=acme", group_by=group_by)
    (total,) = [totals] if group_by is None else totals
    for value in (total.input_tokens, total.output_tokens, total.context_tokens):
        # Exact on PostgreSQL and MariaDB; SQLite sums floats, exact below 2^53 only.
        assert value == pytest.approx(2 * MAX_TOTAL_TOKENS, rel=1e-15)
        if connection.vendor != "sqlite":
            assert value == 2 * MAX_TOTAL_TOKENS
