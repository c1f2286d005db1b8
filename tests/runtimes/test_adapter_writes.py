"""The LangChain history's and Pydantic AI's write path (docs/design.md §19.2, §19.3, §12.4):
each message's record is checked by the content rule once and stored as ``to_cortex``
describes it, verbatim or, where the rule refuses it, as JSON text that reads back equal; on
PostgreSQL a turn is one call of the multi-message append function (§14)."""

from __future__ import annotations

import pytest

pytest.importorskip("langchain_core")
pytest.importorskip("pydantic_ai")

from django.db import connection
from django.test.utils import CaptureQueriesContext
from langchain_core.messages import AIMessage, HumanMessage
from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart

from cortex_sessions import content, services, signals
from cortex_sessions.integrations import blocks, pydantic_ai
from cortex_sessions.integrations.langchain import CortexChatMessageHistory
from cortex_sessions.integrations.langchain.messages import to_cortex
from cortex_sessions.models import Message, Session
from cortex_sessions.services import _pg, message_input

pytestmark = pytest.mark.django_db

SCOPE = "org=acme/user=alice"
AGENT = "writer"


def _langchain(session, messages):
    CortexChatMessageHistory(scope=SCOPE, agent_id=AGENT, session_id=session.pk).add_messages(
        messages
    )


def _pydantic(session, messages):
    pydantic_ai.save_messages(scope=SCOPE, agent_id=AGENT, messages=messages, session_id=session.pk)


TURNS = {
    "langchain": (_langchain, to_cortex, [HumanMessage("Hi", id="h"), AIMessage("Hello", id="a")]),
    "pydantic-ai": (
        _pydantic,
        pydantic_ai.to_cortex,
        [
            ModelRequest(parts=[UserPromptPart("Hi")]),
            ModelResponse(parts=[TextPart("Hello")], model_name="m"),
        ],
    ),
}


@pytest.fixture
def session():
    return services.create_session(scope=SCOPE, agent_id=AGENT)


@pytest.mark.parametrize("adapter", sorted(TURNS))
def test_each_record_is_walked_by_the_content_rule_once(adapter, session, monkeypatch):
    # The adapter's storability test and the append's validation are one walk: a record is
    # not walked by one and then again by the other (strings alone are cheap checks).
    write, _, turn = TURNS[adapter]
    write(session, turn)  # the first write of a pinned session resolves it
    walks = []
    check = content.check_json_value

    def counting(value, **kwargs):
        if not isinstance(value, str):
            walks.append(value)
        return check(value, **kwargs)

    monkeypatch.setattr(content, "check_json_value", counting)
    monkeypatch.setattr(blocks, "check_json_value", counting)
    monkeypatch.setattr(message_input, "check_json_value", counting)
    write(session, turn)
    assert len(walks) == len(turn)
    assert Session.objects.get(pk=session.pk).message_count == 2 * len(turn)


@pytest.mark.parametrize("adapter", sorted(TURNS))
def test_a_turn_is_stored_as_to_cortex_describes_it(adapter, session):
    write, convert, turn = TURNS[adapter]
    with CaptureQueriesContext(connection) as captured:
        write(session, turn)
    stored = list(Message.objects.filter(session=session).order_by("seq"))
    assert [(m.role, m.content) for m in stored] == [
        tuple(convert(message).values()) for message in turn
    ]
    row = Session.objects.get(pk=session.pk)
    assert (row.message_count, row.last_seq, row.last_message) == (2, 2, "Hello")
    if _pg.serves("default"):
        appends = [q["sql"] for q in captured.captured_queries if _pg.APPEND_MANY in q["sql"]]
        assert len(appends) == 1


def _deep(levels):
    value = "bottom"
    for _ in range(levels):
        value = {"d": value}
    return value


REFUSED = {
    "lone surrogate": {"note": "bad \ud800 text"},
    "too many keys": {f"k{n}": n for n in range(1001)},
    "nested too deep": _deep(40),
}


@pytest.mark.parametrize("kind", sorted(REFUSED))
def test_a_langchain_record_the_content_rule_refuses_is_kept_as_json_text(kind, session):
    sent = [
        HumanMessage("plain", id="p"),
        AIMessage("odd", id="o", additional_kwargs=REFUSED[kind]),
    ]
    history = CortexChatMessageHistory(scope=SCOPE, agent_id=AGENT, session_id=session.pk)
    history.add_messages(sent)
    assert history.messages == sent
    plain, odd = Message.objects.filter(session=session).order_by("seq")
    assert "message" in plain.content[-1] and "message_json" in odd.content[-1]
    assert [m.content for m in (plain, odd)] == [to_cortex(m)["content"] for m in sent]


def test_a_pydantic_ai_record_the_content_rule_refuses_is_kept_as_json_text(session):
    sent = [
        ModelRequest(parts=[UserPromptPart("lone \ud800 surrogate")]),
        ModelResponse(parts=[TextPart("fine")], model_name="m"),
    ]
    pydantic_ai.save_messages(scope=SCOPE, agent_id=AGENT, messages=sent, session_id=session.pk)
    loaded = pydantic_ai.load_history(scope=SCOPE, agent_id=AGENT, session_id=session.pk)
    assert loaded == sent
    odd, plain = Message.objects.filter(session=session).order_by("seq")
    assert "message_json" in odd.content[-1] and "message" in plain.content[-1]
    assert odd.content[0] == {"type": "text", "text": "lone ? surrogate"}


def _fields(instance):
    return {f.attname: getattr(instance, f.attname) for f in type(instance)._meta.concrete_fields}


@pytest.mark.parametrize("adapter", sorted(TURNS))
def test_a_receiver_gets_the_turns_rows_as_stored(
    adapter, session, django_capture_on_commit_callbacks
):
    # The adapters read no row of their appends, so on PostgreSQL the rows are built only for
    # a receiver of messages_appended (docs/design.md §12.2): one connected gets them all.
    write, _, turn = TURNS[adapter]
    received = []

    def receiver(sender, session, messages, **kwargs):
        received.append((session, messages))

    signals.messages_appended.connect(receiver)
    try:
        with django_capture_on_commit_callbacks(execute=True):
            write(session, turn)
    finally:
        signals.messages_appended.disconnect(receiver)
    ((got, messages),) = received
    assert _fields(got) == _fields(Session.objects.get(pk=session.pk))
    assert (got.message_count, got.last_seq, got.last_message) == (2, 2, "Hello")
    stored = list(Message.objects.filter(session=session).order_by("seq"))
    assert [_fields(m) for m in messages] == [_fields(m) for m in stored]
    assert all(m.session is got and not m._state.adding for m in messages)


@pytest.mark.parametrize("adapter", sorted(TURNS))
def test_without_a_receiver_a_turn_builds_no_message(adapter, session, monkeypatch):
    if not _pg.serves("default"):
        pytest.skip("the ORM path's bulk_create builds the rows it inserts")
    write, _, turn = TURNS[adapter]
    write(session, turn)  # the first write of a pinned session resolves it
    built = []
    from_db = Message.from_db

    def counting(db, names, values):
        built.append(values)
        return from_db(db, names, values)

    monkeypatch.setattr(Message, "from_db", counting)
    write(session, turn)
    assert built == []
    assert Session.objects.get(pk=session.pk).message_count == 2 * len(turn)
