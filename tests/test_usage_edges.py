"""Usage and token counts at the app's edges (docs/design.md §16.1-§16.2): the system check of
``TOKEN_COUNTER``, import and export, the admin, and migration ``0019_context_window``'s data
step on existing rows."""

from __future__ import annotations

import io
import json
from decimal import Decimal

import pytest
from django.db import connection
from django.test import override_settings
from django.urls import reverse

from cortex_sessions import services, transfer
from cortex_sessions.checks import check_settings
from cortex_sessions.exceptions import InvalidUsage
from cortex_sessions.models import Message, Session
from cortex_sessions.tokens import estimate_tokens
from tests.test_migrations import APP, migrator  # noqa: F401  (the fixture)

SCOPE = "org=acme/user=1"
USAGE = {"input_tokens": 12, "output_tokens": 3, "model": "m", "cost": "0.0012"}


def ids(**settings):
    with override_settings(CORTEX_SESSIONS=settings):
        return [message.id for message in check_settings()]


NOT_CALLABLE = 42


def answers_a_string(role, content):
    return "3"


def answers_negative(role, content):
    return -1


def raises(role, content):
    raise RuntimeError("no tokenizer")


def counts_one(role, content):
    return 1


# -- the system check -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "no.such.module.counter",
        "nodots",
        "tests.test_usage_edges.NOT_CALLABLE",
        "tests.test_usage_edges.answers_a_string",
        "tests.test_usage_edges.answers_negative",
        "tests.test_usage_edges.raises",
        42,
    ],
)
def test_a_bad_token_counter_is_e022(path):
    assert ids(TOKEN_COUNTER=path) == ["cortex_sessions.E022"]


def test_a_good_token_counter_passes_the_check():
    assert ids(TOKEN_COUNTER="tests.test_usage_edges.counts_one") == []
    assert ids(TOKEN_COUNTER=counts_one) == []
    assert ids() == []


# -- import and export ----------------------------------------------------------------------------


@pytest.mark.django_db
def test_usage_travels_through_export_and_import_and_the_totals_follow():
    session = services.create_session(scope=SCOPE, agent_id="a", title="t")
    services.append_messages(
        scope=SCOPE,
        session_id=session.pk,
        messages=[
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "hello", "usage": USAGE},
        ],
    )
    exported = "".join(transfer.export_conversations(scope=SCOPE))
    (line,) = exported.splitlines()
    messages = json.loads(line)["messages"]
    assert "usage" not in messages[0] and messages[1]["usage"] == USAGE
    report = transfer.import_conversations(io.StringIO(exported), scope="org=other", agent_id="a")
    assert report.imported == 1
    copy = Session.objects.get(scope="org=other")
    assert (copy.input_tokens, copy.output_tokens, copy.cost) == (12, 3, Decimal("0.0012"))
    assert copy.context_tokens == Session.objects.get(pk=session.pk).context_tokens
    assert list(Message.objects.filter(session=copy).order_by("seq").values_list("usage")) == [
        (None,),
        (USAGE,),
    ]


@pytest.mark.django_db
def test_an_import_with_bad_usage_imports_nothing_of_that_conversation():
    line = json.dumps({"messages": [{"role": "assistant", "content": "x", "usage": {"cost": 0.1}}]})
    with pytest.raises(InvalidUsage, match=r"messages\[0\]"):
        transfer.parse_conversation(line)
    report = transfer.import_conversations(io.StringIO(line + "\n"), scope=SCOPE, agent_id="a")
    assert (report.imported, report.failed) == (0, 1)
    assert not Session.objects.exists()


# -- admin ----------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_admin_shows_usage_and_totals_read_only(admin_client):
    session = services.create_session(scope=SCOPE, agent_id="a")
    result = services.append_messages(
        scope=SCOPE,
        session_id=session.pk,
        messages=[{"role": "assistant", "content": "hello", "usage": USAGE}],
    )
    page = admin_client.get(
        reverse("admin:cortex_sessions_message_change", args=[result.messages[0].pk])
    ).content.decode()
    assert "&quot;input_tokens&quot;: 12" in page and 'name="usage"' not in page
    page = admin_client.get(
        reverse("admin:cortex_sessions_session_change", args=[session.pk])
    ).content.decode()
    assert "0.001200" in page and 'name="cost"' not in page
    # A post naming the totals writes none of them.
    admin_client.post(
        reverse("admin:cortex_sessions_session_change", args=[session.pk]),
        {"title": "x", "metadata": "{}", "cost": "99", "input_tokens": "5"},
    )
    stored = Session.objects.get(pk=session.pk)
    assert (stored.input_tokens, stored.cost) == (12, Decimal("0.0012"))


# -- the migration --------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_0019_gives_existing_messages_their_token_counts_and_sessions_their_context(
    migrator,  # noqa: F811
    monkeypatch,
):
    from cortex_sessions.migrations import _operations as operations

    monkeypatch.setattr(operations, "BATCH_SIZE", 2)  # several batches of each kind
    apps = migrator.migrate("0018_drop_pre_release_append_functions")
    OldSession = apps.get_model(APP, "Session")
    OldMessage = apps.get_model(APP, "Message")
    texts = {}
    for n in range(3):
        session = OldSession.objects.create(agent_id="a", scope=f"org=x/user={n}")
        for seq in range(1, n + 2):
            text = "word " * (seq * 3)
            OldMessage.objects.create(
                session=session,
                agent_id="a",
                scope=session.scope,
                seq=seq,
                role="user",
                content=[{"type": "text", "text": text}],
            )
            texts.setdefault(session.pk, []).append(text)
    OldMessage.objects.create(agent_id="legacy", scope="org=x", role="user", content=[])
    empty = OldSession.objects.create(agent_id="a", scope="org=x/empty=1")

    apps = migrator.migrate("0019_context_window")
    # The models as 0019 leaves them (later migrations add columns the database lacks here).
    Session = apps.get_model(APP, "Session")
    Message = apps.get_model(APP, "Message")

    for pk, session_texts in texts.items():
        counts = [estimate_tokens("user", [{"type": "text", "text": t}]) for t in session_texts]
        stored = list(
            Message.objects.filter(session_id=pk)
            .order_by("seq")
            .values_list("token_count", flat=True)
        )
        assert stored == counts
        assert Session.objects.get(pk=pk).context_tokens == sum(counts)
    assert Message.objects.get(session__isnull=True).token_count == 4
    assert Session.objects.get(pk=empty.pk).context_tokens == 0
    # Backward: the columns go, no row does.
    migrator.migrate("0018_drop_pre_release_append_functions")
    with connection.cursor() as cursor:
        columns = [
            column.name
            for column in connection.introspection.get_table_description(
                cursor, "cortex_sessions_message"
            )
        ]
    assert "token_count" not in columns and "usage" not in columns
    assert OldMessage.objects.count() == 7


# -- compactions through export and import (docs/design.md §16.3) -------------------------------------


def _window(session):
    window = services.context_messages(scope=session.scope, session_id=session.pk)
    rows = [(m.role, m.source, m.text, m.token_count) for m in window.messages]
    return rows, window.compacted_through_seq, window.tokens


@pytest.mark.django_db
def test_a_session_with_two_compactions_round_trips_exactly():
    session = services.create_session(scope=SCOPE, agent_id="a", title="t")
    say = [{"role": "user", "content": f"turn {i} " + "x" * i} for i in range(1, 9)]
    services.append_messages(scope=SCOPE, session_id=session.pk, messages=say[:5])
    services.delete_message(scope=SCOPE, session_id=session.pk, seq=2)  # a gap in the seqs
    services.compact_session(
        scope=SCOPE, session_id=session.pk, through_seq=3, summary="first", usage=USAGE
    )  # seq 6, stands for 1 and 3
    services.append_messages(scope=SCOPE, session_id=session.pk, messages=say[5:7])  # 7, 8
    services.compact_session(scope=SCOPE, session_id=session.pk, through_seq=7, summary="second")
    services.append_messages(scope=SCOPE, session_id=session.pk, messages=say[7:])  # 10
    session.refresh_from_db()

    exported = "".join(transfer.export_conversations(scope=SCOPE))
    messages = json.loads(exported)["messages"]
    # Renumbered as the import numbers them: 1, 3, 4, 5, S1, 7, 8, S2, 10 -> positions 1..9.
    assert [m.get("compacts_through_seq") for m in messages] == [
        None, None, None, None, 2, None, None, 6, None,
    ]  # fmt: skip
    report = transfer.import_conversations(io.StringIO(exported), scope="org=other", agent_id="a")
    assert (report.imported, report.failed) == (1, 0), report.errors
    copy = Session.objects.get(scope="org=other")

    assert _window(copy) == (_window(session)[0], 6, session.context_tokens)
    assert _window(session)[1:] == (7, session.context_tokens)
    fields = ("message_count", "input_tokens", "output_tokens", "cost", "context_tokens")
    assert [getattr(copy, f) for f in fields] == [getattr(session, f) for f in fields]
    # The first compaction governs again once the second summary is deleted, in both.
    for each, summary_seq in ((session, 9), (copy, 8)):
        services.delete_message(scope=each.scope, session_id=each.pk, seq=summary_seq)
        each.refresh_from_db()
    assert _window(copy)[0] == _window(session)[0]
    assert copy.context_tokens == session.context_tokens
    # Exported again, the copy writes the same line (the ids aside).
    again = json.loads("".join(transfer.export_conversations(scope="org=other")))
    assert (
        again["messages"]
        == json.loads("".join(transfer.export_conversations(scope=SCOPE)))["messages"]
    )


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("message", "code"),
    [
        ({"role": "user", "source": "checkpoint", "content": "s", "compacts_through_seq": 2}, "invalid_through_seq"),
        ({"role": "user", "source": "checkpoint", "content": "s", "compacts_through_seq": -1}, "invalid_through_seq"),
        ({"role": "user", "source": "checkpoint", "content": "s", "compacts_through_seq": True}, "invalid_through_seq"),
        ({"role": "user", "source": "checkpoint", "content": "s", "compacts_through_seq": "1"}, "invalid_through_seq"),
        ({"role": "assistant", "content": "s", "compacts_through_seq": 1}, "invalid_conversation"),
        ({"role": "user", "content": "s", "compacts_through_seq": 1}, "invalid_conversation"),
    ],
)  # fmt: skip
def test_a_bad_compacts_through_seq_imports_nothing_of_that_conversation(message, code):
    line = json.dumps({"messages": [{"role": "user", "content": "a"}, message]})
    report = transfer.import_conversations(io.StringIO(line + "\n"), scope=SCOPE, agent_id="a")
    assert (report.imported, report.failed) == (0, 1)
    assert report.errors[0].code == code
    assert not Session.objects.exists()


def _summary(through):
    return {"role": "user", "source": "checkpoint", "content": "s", "compacts_through_seq": through}


@pytest.mark.django_db
@pytest.mark.parametrize(("first", "second", "imported"), [(2, 1, 0), (2, 2, 1), (0, 3, 1)])
def test_a_later_summary_covering_less_than_an_earlier_one_imports_nothing(first, second, imported):
    """``compact_session`` refuses a compaction not past the previous one; an export or a fork
    after deletes can write two equal ones, never a smaller one (§16.3)."""
    plain = {"role": "user", "content": "a"}
    messages = [plain, plain, _summary(first), plain, _summary(second)]
    line = json.dumps({"messages": messages})
    report = transfer.import_conversations(io.StringIO(line + "\n"), scope=SCOPE, agent_id="a")
    assert report.imported == imported
    if not imported:
        assert report.errors[0].code == "invalid_through_seq"
        assert not Session.objects.exists()


# -- the cost's digits per database (docs/context-window.md, "On SQLite") ---------------------------


@pytest.mark.django_db
def test_a_cost_total_keeps_every_digit_except_on_sqlite_which_keeps_fifteen():
    session, _ = services.resolve_session(scope=SCOPE, agent_id="bot")
    costs = ["9999999999.999999", "0.000001", "1234567890.123456"]
    for cost in costs:
        services.append_messages(
            scope=SCOPE,
            session_id=session.id,
            messages=[{"role": "assistant", "content": "hi", "usage": {"cost": cost}}],
        )
    exact = sum(map(Decimal, costs))  # 11234567890.123456: 17 significant digits
    if connection.vendor == "sqlite":
        expected = Decimal(f"{exact:.15g}").quantize(Decimal("0.000001"))
        assert expected != exact  # the documented loss, as SQLite stores a decimal column
    else:
        expected = exact
    session.refresh_from_db()
    assert session.cost == expected
    assert services.usage_totals(scope=SCOPE).cost == expected
    assert services.recount_sessions(scope=SCOPE) == []  # no false drift either way
    assert [
        m.usage["cost"] for m in Message.objects.filter(session=session).order_by("seq")
    ] == costs
