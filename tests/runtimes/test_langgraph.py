"""``CortexCheckpointSaver`` as a cortex store (docs/design.md §19.1): threads are sessions.

LangGraph's own contract is ``test_langgraph_conformance.py``; this pins what only a scoped,
session-backed saver has: thread ids as session ids, scope and agent from the config, tenant
safety, the ``messages`` channel mirrored into the session (new messages only, once per
checkpoint), archived sessions, deletion with the session, the admin, and a real graph.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

pytest.importorskip("langgraph")

from django.contrib.auth import get_user_model
from django.db import OperationalError, connection, transaction
from django.urls import reverse
from django.utils import timezone
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, HumanMessage, RemoveMessage
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.graph import START, MessagesState, StateGraph

from cortex_sessions import services
from cortex_sessions.exceptions import (
    InvalidContent,
    InvalidInput,
    InvalidMetadata,
    InvalidText,
    NulCharacter,
    ScopeForbidden,
    SessionArchived,
    SessionNotFound,
    ValueTooLong,
)
from cortex_sessions.integrations.langchain import CortexChatMessageHistory
from cortex_sessions.integrations.langgraph import (
    CortexCheckpointSaver,
    athread_config,
    mirror,
    thread_config,
    threads,
)
from cortex_sessions.integrations.langgraph.mirror import new_messages
from cortex_sessions.integrations.langgraph.models import (
    Checkpoint,
    CheckpointBlob,
    CheckpointWrite,
)
from cortex_sessions.models import Message, Session
from example_project.runtimes.langgraph_example import main
from tests.asyncio_support import async_test
from tests.test_concurrency import run_together

pytestmark = pytest.mark.django_db

ACME = "org=acme"
ALICE = "org=acme/user=alice"
GLOBEX = "org=globex"
AGENT = "graph-bot"


def _config(thread_id, **extra):
    return {"configurable": {"thread_id": str(thread_id), "checkpoint_ns": "", **extra}}


def _put(saver, config, values=None, parent=None):
    checkpoint = empty_checkpoint()
    values = values or {}
    checkpoint["channel_values"] = values
    checkpoint["channel_versions"] = {key: saver.get_next_version(None, None) for key in values}
    if parent is not None:
        config = {"configurable": {**config["configurable"], "checkpoint_id": parent}}
    stored = saver.put(
        config, checkpoint, {"source": "loop", "step": 0}, checkpoint["channel_versions"]
    )
    return stored["configurable"]["checkpoint_id"]


def chat_graph(saver, replies):
    model = FakeMessagesListChatModel(responses=[AIMessage(text) for text in replies])

    def chat(state: MessagesState):
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("chat", chat)
    builder.add_edge(START, "chat")
    return builder.compile(checkpointer=saver)


@pytest.mark.concurrent_db  # a sync graph run (see the note above the graph runs below)
@pytest.mark.django_db(transaction=True)
def test_a_node_answer_the_mirror_refuses_is_not_kept_as_a_pending_write():
    # An answer holding NaN: put refuses to mirror it (InvalidContent). Kept as a pending
    # write, every later step applied it and every put refused it: a resume raised without
    # running the node. Refused at put_writes, the thread goes on with a good answer.
    saver = CortexCheckpointSaver(scope=ACME, agent_id=AGENT)
    answers = iter(
        [AIMessage("bad", id="a1", additional_kwargs={"v": float("nan")}), AIMessage("ok", id="a2")]
    )
    builder = StateGraph(MessagesState)
    builder.add_node("chat", lambda state: {"messages": [next(answers)]})
    builder.add_edge(START, "chat")
    graph = builder.compile(checkpointer=saver)
    config = thread_config(scope=ALICE, agent_id=AGENT)
    with pytest.raises(InvalidContent):
        graph.invoke({"messages": [HumanMessage("q1", id="q1")]}, config)
    pk = config["configurable"]["thread_id"]
    pending = saver.get_tuple(config).pending_writes
    assert "bad" not in repr(pending)
    assert [m.text for m in Message.objects.filter(session_id=pk).order_by("seq")] == ["q1"]
    state = graph.invoke(None, config)  # the resume runs the node again
    assert [m.content for m in state["messages"]] == ["q1", "ok"]
    assert [m.text for m in Message.objects.filter(session_id=pk).order_by("seq")] == ["q1", "ok"]


def test_first_put_creates_the_session_with_the_thread_id_at_the_configs_scope():
    saver = CortexCheckpointSaver(scope=ACME, agent_id=AGENT)
    thread_id = uuid.uuid4()
    _put(saver, _config(thread_id, scope=ALICE))
    session = Session.objects.get(pk=thread_id)
    assert (session.scope, session.agent_id, session.is_default) == (ALICE, AGENT, False)
    assert Checkpoint.objects.filter(session=session).count() == 1


def test_thread_config_names_the_agents_default_session():
    config = thread_config(scope=ALICE, agent_id=AGENT)
    default, _ = services.resolve_session(scope=ALICE, agent_id=AGENT)
    assert config["configurable"] == {
        "thread_id": str(default.pk),
        "scope": ALICE,
        "agent_id": AGENT,
    }


# A sync graph run puts its checkpoints and writes from LangGraph's worker threads, concurrently
# and on their own connections: these tests commit for real, on a database with real concurrent
# transactions (in-memory SQLite refuses the second writer at once: "table is locked"). The async
# run below covers the same ground on every database.
@pytest.mark.concurrent_db
@pytest.mark.django_db(transaction=True)
def test_a_graph_run_mirrors_its_messages_into_the_session_once_each():
    saver = CortexCheckpointSaver(scope=ACME, agent_id=AGENT)
    graph = chat_graph(saver, ["San Francisco.", "California."])
    config = thread_config(scope=ALICE, agent_id=AGENT)
    graph.invoke({"messages": [HumanMessage("Which city?", id="q1")]}, config)
    graph.invoke({"messages": [HumanMessage("Which state?", id="q2")]}, config)
    session = Session.objects.get(pk=config["configurable"]["thread_id"])
    rows = list(Message.objects.filter(session=session).order_by("seq"))
    assert [(row.role, row.text) for row in rows] == [
        ("user", "Which city?"),
        ("assistant", "San Francisco."),
        ("user", "Which state?"),
        ("assistant", "California."),
    ]
    assert session.message_count == 4
    # The mirrored messages are the graph's, exactly: the LangChain history reads them back.
    history = CortexChatMessageHistory(scope=ALICE, agent_id=AGENT, session_id=session.pk)
    assert history.messages == graph.get_state(config).values["messages"]


def test_a_repeated_put_of_one_checkpoint_mirrors_nothing_twice():
    saver = CortexCheckpointSaver(scope=ACME, agent_id=AGENT)
    thread_id = uuid.uuid4()
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {"messages": [HumanMessage("hi", id="h1")]}
    checkpoint["channel_versions"] = {"messages": "1"}
    for _ in range(2):
        saver.put(_config(thread_id), checkpoint, {"step": 0}, {"messages": "1"})
    assert Message.objects.filter(session_id=thread_id).count() == 1
    assert Checkpoint.objects.filter(session_id=thread_id).count() == 1


def test_only_messages_the_parent_did_not_hold_are_mirrored():
    saver = CortexCheckpointSaver(scope=ACME, agent_id=AGENT)
    thread_id = uuid.uuid4()
    first = _put(saver, _config(thread_id), {"messages": [HumanMessage("a", id="a")]})
    _put(
        saver,
        _config(thread_id),
        {"messages": [HumanMessage("a", id="a"), AIMessage("b", id="b")]},
        parent=first,
    )
    assert [m.text for m in Message.objects.filter(session_id=thread_id).order_by("seq")] == [
        "a",
        "b",
    ]


def test_child_namespaces_and_other_channels_are_not_mirrored():
    saver = CortexCheckpointSaver(scope=ACME, agent_id=AGENT)
    thread_id = uuid.uuid4()
    _put(saver, _config(thread_id, checkpoint_ns="sub:1"), {"messages": [HumanMessage("x")]})
    _put(saver, _config(thread_id), {"notes": [HumanMessage("y")]})
    assert not Message.objects.filter(session_id=thread_id).exists()
    quiet = CortexCheckpointSaver(scope=ACME, agent_id=AGENT, messages_key=None)
    _put(quiet, _config(thread_id), {"messages": [HumanMessage("z")]})
    assert not Message.objects.filter(session_id=thread_id).exists()


def test_new_messages_by_id_then_by_equality():
    a, b = HumanMessage("a", id="a"), AIMessage("b")
    assert new_messages([a, b], [a]) == [b]
    assert new_messages([a, b], [a, AIMessage("b")]) == []
    assert new_messages([a, RemoveMessage(id="a")], []) == [a]
    assert new_messages("not a list", None) == []


def test_new_messages_after_the_previous_values_own_objects_are_only_those_it_lacks():
    """The fast path (the value starts with the previous value's objects, as the channel's
    reducer and the remembered values keep them) finds what a full comparison finds."""
    a, b, anon = HumanMessage("a", id="a"), AIMessage("b", id="b"), AIMessage("anon")
    before = (a, anon, "not a message", b)
    again = HumanMessage("a again", id="a")  # an id already seen: not new
    c = AIMessage("c", id="c")
    current = [*before, again, AIMessage("anon"), c, RemoveMessage(id="b"), AIMessage("d")]
    # after the prefix, a message without an id equal to an earlier one is a new turn
    assert new_messages(current, before) == [AIMessage("anon"), c, AIMessage("d")]
    assert new_messages(current, list(before)) == [AIMessage("anon"), c, AIMessage("d")]
    decoded = [m.model_copy() if hasattr(m, "model_copy") else m for m in before]
    assert new_messages(current, decoded) == [AIMessage("anon"), c, AIMessage("d")]  # equal
    shuffled = [b, a, anon, "not a message", c]  # not a prefix: every message compared
    assert new_messages(shuffled, before) == [c]
    assert new_messages([a], before) == []  # shorter than before


def test_new_messages_count_each_earlier_message_without_an_id_once():
    """Not a prefix (a value rebuilt by a reducer): each earlier message without an id matches
    one equal message, so a repeated one is new (a multiset, not a set)."""
    yes, ok = HumanMessage("yes"), AIMessage("OK.")
    before = [HumanMessage("Delete?"), ok, yes, ok]
    current = [HumanMessage("Delete?"), HumanMessage("yes"), AIMessage("OK.")]
    current += [AIMessage("OK."), HumanMessage("yes"), AIMessage("OK.")]
    assert new_messages(current, before) == [HumanMessage("yes"), AIMessage("OK.")]
    assert new_messages(list(reversed(before)), before) == []


def test_a_repeated_message_without_an_id_is_mirrored_as_its_own_turn():
    """A graph whose reducer keeps messages as given (``operator.add``, no ids assigned): the
    user's second "yes" and the model's second "OK." are turns of their own, whether the
    parent's value is the one the saver remembered or decoded from its blob (forgotten)."""
    thread_id = uuid.uuid4()
    config = _config(thread_id, scope=ALICE)
    value: list = []
    parent, version = None, None
    for turn, text in enumerate(["Delete the file?", "yes", "And the folder?", "yes"]):
        saver = CortexCheckpointSaver(scope=ACME, agent_id=AGENT)
        if turn >= 2:
            mirror.forget(thread_id)  # the parent's value read back from its blob: equal objects
        value = [*value, HumanMessage(text), AIMessage("OK.")]  # as operator.add makes it
        version = saver.get_next_version(version, None)
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {"messages": value}
        checkpoint["channel_versions"] = {"messages": version}
        at = config if parent is None else _config(thread_id, scope=ALICE, checkpoint_id=parent)
        stored = saver.put(at, checkpoint, {"source": "loop", "step": turn}, {"messages": version})
        parent = stored["configurable"]["checkpoint_id"]
    texts = list(
        Message.objects.filter(session_id=thread_id).order_by("seq").values_list("role", "content")
    )
    assert [(role, content[0]["text"]) for role, content in texts] == [
        ("user", "Delete the file?"),
        ("assistant", "OK."),
        ("user", "yes"),
        ("assistant", "OK."),
        ("user", "And the folder?"),
        ("assistant", "OK."),
        ("user", "yes"),
        ("assistant", "OK."),
    ]
    assert Session.objects.get(pk=thread_id).message_count == 8


def test_put_writes_to_a_new_thread_creates_its_session_as_put_does():
    """A sync graph run writes a new thread's first writes from LangGraph's worker threads,
    possibly before the put of the checkpoint they follow has committed: put_writes creates the
    session as put does, and the put then finds it (docs/design.md §19.1)."""
    saver = CortexCheckpointSaver(scope=ACME, agent_id=AGENT)
    thread_id = uuid.uuid4()
    checkpoint = empty_checkpoint()
    config = _config(thread_id, scope=ALICE, checkpoint_id=checkpoint["id"])
    saver.put_writes(config, [("ch", 1)], "task")
    session = Session.objects.get(pk=thread_id)
    assert (session.scope, session.agent_id) == (ALICE, AGENT)
    saver.put(_config(thread_id, scope=ALICE), checkpoint, {"source": "loop", "step": 0}, {})
    assert saver.get_tuple(config).pending_writes == [("task", "ch", 1)]
    assert Session.objects.filter(pk=thread_id).count() == 1
    anonymous = CortexCheckpointSaver(scope=ACME)  # no agent to create the thread for
    with pytest.raises(InvalidInput):
        anonymous.put_writes(_config(uuid.uuid4(), checkpoint_id="x"), [("ch", 1)], "task")


@pytest.mark.concurrent_db
@pytest.mark.django_db(transaction=True)
def test_a_sync_graph_run_on_a_new_thread_id_answers():
    """``graph.invoke`` with a new thread id (no ``thread_config`` first): its first put and
    the tasks' put_writes race on LangGraph's worker threads, and the run still answers."""
    saver = CortexCheckpointSaver(scope=ACME, agent_id=AGENT)
    for _ in range(5):
        graph = chat_graph(saver, ["Hello."])
        thread_id = uuid.uuid4()
        config = {"configurable": {"thread_id": str(thread_id)}}
        result = graph.invoke({"messages": [HumanMessage("Hi", id="q")]}, config)
        assert [m.content for m in result["messages"]] == ["Hi", "Hello."]
        assert Session.objects.get(pk=thread_id).message_count == 2


@pytest.mark.concurrent_db
@pytest.mark.django_db(transaction=True)
def test_puts_creating_one_new_thread_at_once_all_land():
    """Several puts creating the same new thread at once (two runs of a graph on one new thread
    id): on MySQL/MariaDB the losers of the insert race deadlock on the new row, and the
    victim's put is restarted (threads.retrying_deadlocks); every put lands, one session."""
    saver = CortexCheckpointSaver(scope=ACME, agent_id=AGENT)
    for _ in range(8):
        thread_id = uuid.uuid4()
        config, value = _config(thread_id), {"messages": [HumanMessage("hi", id="hi")]}
        run_together(4, lambda _, config=config, value=value: _put(saver, config, value))
        assert Checkpoint.objects.filter(session_id=thread_id).count() == 4
        # four first checkpoints (no parent), each mirroring its message, counted once each
        session = Session.objects.get(pk=thread_id)
        assert session.message_count == Message.objects.filter(session=session).count() == 4


@pytest.mark.django_db(transaction=True)  # the test's own transaction would forbid a restart
def test_retrying_deadlocks_restarts_only_a_mysql_deadlock_victim_outside_a_transaction():
    calls = []

    def deadlocked_twice() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise OperationalError(1213, "Deadlock found when trying to get lock")
        return "stored"

    if connection.vendor == "mysql":
        assert threads.retrying_deadlocks(deadlocked_twice) == "stored"
        assert len(calls) == 3
        calls.clear()
        with transaction.atomic(), pytest.raises(OperationalError):  # nothing to restart
            threads.retrying_deadlocks(deadlocked_twice)
        assert len(calls) == 1
    else:  # no such error code elsewhere: raised as it is
        with pytest.raises(OperationalError):
            threads.retrying_deadlocks(deadlocked_twice)
        assert len(calls) == 1

    def always() -> None:
        calls.append(1)
        raise OperationalError(1213, "Deadlock found when trying to get lock")

    calls.clear()
    with pytest.raises(OperationalError):
        threads.retrying_deadlocks(always)
    assert len(calls) == (threads.CREATE_ATTEMPTS if connection.vendor == "mysql" else 1)


def test_threads_of_another_tenant_are_invisible_and_untouchable():
    acme = CortexCheckpointSaver(scope=ACME, agent_id=AGENT)
    globex = CortexCheckpointSaver(scope=GLOBEX, agent_id=AGENT)
    thread_id = uuid.uuid4()
    _put(acme, _config(thread_id), {"k": "v"})
    assert globex.get_tuple(_config(thread_id)) is None
    assert list(globex.list(_config(thread_id))) == []
    assert list(globex.list(None)) == []
    with pytest.raises(SessionNotFound):
        _put(globex, _config(thread_id), {"k": "theirs"})
    with pytest.raises(SessionNotFound):
        globex.put_writes(
            {"configurable": {**_config(thread_id)["configurable"], "checkpoint_id": "x"}},
            [("ch", 1)],
            "task",
        )
    globex.delete_thread(str(thread_id))
    assert acme.get_tuple(_config(thread_id)).checkpoint["channel_values"] == {"k": "v"}


def test_a_config_scope_outside_the_savers_is_forbidden():
    saver = CortexCheckpointSaver(scope=ACME, agent_id=AGENT)
    with pytest.raises(ScopeForbidden):
        saver.get_tuple(_config(uuid.uuid4(), scope=GLOBEX))


def test_threads_of_another_agent_are_not_found():
    ours = CortexCheckpointSaver(scope=ACME, agent_id=AGENT)
    theirs = services.create_session(scope=ACME, agent_id="other")
    with pytest.raises(SessionNotFound):
        _put(ours, _config(theirs.pk), {"k": "v"})
    assert ours.get_tuple(_config(theirs.pk)) is None


def test_list_without_a_thread_lists_every_thread_within_the_scope():
    saver = CortexCheckpointSaver(scope=ACME, agent_id=AGENT)
    mine = [uuid.uuid4(), uuid.uuid4()]
    for thread_id in mine:
        _put(saver, _config(thread_id, scope=ALICE), {"k": 1})
    _put(CortexCheckpointSaver(scope=GLOBEX, agent_id=AGENT), _config(uuid.uuid4()), {"k": 2})
    assert {t.config["configurable"]["thread_id"] for t in saver.list(None)} == set(map(str, mine))
    narrowed = saver.list({"configurable": {"scope": "org=acme/user=bob"}})
    assert list(narrowed) == []


def _list_with_queries(saver, config):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as captured:
        listed = list(saver.list(config))
    return listed, len(captured.captured_queries)


@pytest.mark.parametrize("chunk", [500, 1])
def test_listing_reads_every_checkpoints_channel_values_in_a_fixed_number_of_queries(
    monkeypatch, chunk
):
    from cortex_sessions.integrations.langgraph import store

    monkeypatch.setattr(store, "_BLOB_CHUNK", chunk)
    saver = CortexCheckpointSaver(scope=ACME, agent_id=AGENT)
    thread_id = uuid.uuid4()
    for n in range(2):
        _put(saver, _config(thread_id), {"step": n, "same": "kept"})
    _, two = _list_with_queries(saver, _config(thread_id))
    for n in range(2, 6):
        _put(saver, _config(thread_id), {"step": n, "same": "kept"})
    _put(saver, _config(uuid.uuid4()), {"step": 99})  # another thread: listed with None only
    listed, six = _list_with_queries(saver, _config(thread_id))
    assert [t.checkpoint["channel_values"] for t in listed] == [
        {"step": n, "same": "kept"} for n in reversed(range(6))
    ]
    everything, _ = _list_with_queries(saver, None)
    assert sorted(t.checkpoint["channel_values"]["step"] for t in everything) == [
        *range(6),
        99,
    ]
    if chunk == 500:
        assert six == two


@pytest.mark.parametrize("thread_id", ["thread-1", "", None])
def test_a_thread_id_that_is_no_session_id_is_invalid_input(thread_id):
    saver = CortexCheckpointSaver(scope=ACME, agent_id=AGENT)
    with pytest.raises(InvalidInput) as caught:
        saver.get_tuple({"configurable": {"thread_id": thread_id}})
    assert caught.value.field == "thread_id"
    assert not Session.objects.exists()


def test_a_new_thread_needs_an_agent():
    saver = CortexCheckpointSaver(scope=ACME)
    with pytest.raises(InvalidInput) as caught:
        _put(saver, _config(uuid.uuid4()))
    assert caught.value.field == "agent_id"
    _put(saver, _config(uuid.uuid4(), agent_id="from-config"))
    assert Session.objects.get().agent_id == "from-config"


def test_a_saver_without_an_agent_answers_another_scopes_thread_as_a_missing_one():
    # It could create neither, so both are the missing agent's InvalidInput: which one the
    # id is, another tenant's session or none, is not told (docs/langgraph.md).
    other = services.create_session(scope=GLOBEX, agent_id=AGENT)
    saver = CortexCheckpointSaver(scope=ACME)
    for thread_id in (other.pk, uuid.uuid4()):
        with pytest.raises(InvalidInput) as caught:
            _put(saver, _config(thread_id))
        assert caught.value.field == "agent_id"
        with pytest.raises(InvalidInput) as caught:
            saver.put_writes(_config(thread_id, checkpoint_id="1"), [("step", 1)], "task")
        assert caught.value.field == "agent_id"
    assert list(Session.objects.values_list("pk", flat=True)) == [other.pk]
    assert not Checkpoint.objects.exists() and not CheckpointWrite.objects.exists()


def test_overlong_names_are_refused_and_write_nothing():
    saver = CortexCheckpointSaver(scope=ACME, agent_id=AGENT)
    with pytest.raises(ValueTooLong):
        _put(saver, _config(uuid.uuid4(), checkpoint_ns="n" * 256))
    with pytest.raises(ValueTooLong):
        _put(saver, _config(uuid.uuid4()), {"c" * 256: 1})
    assert not Checkpoint.objects.exists()
    assert not Session.objects.exists()


class _TypedSerde:
    """A serializer that names the type of its values ``kind`` (LangGraph's
    ``SerializerProtocol``); with ``values_only``, the checkpoint itself (a dict) keeps
    the inner serializer's type."""

    def __init__(self, inner, kind, *, values_only=False):
        self.inner, self.kind, self.values_only = inner, kind, values_only

    def dumps_typed(self, value):
        kind, data = self.inner.dumps_typed(value)
        return (kind if self.values_only and isinstance(value, dict) else self.kind), data

    def loads_typed(self, data):
        return self.inner.loads_typed(data)


@pytest.mark.parametrize(
    ("kind", "error"),
    [("t" * 33, ValueTooLong), ("nul\x00", NulCharacter), ("\ud800", InvalidText)],
)
@pytest.mark.parametrize("target", ["checkpoint", "blob", "write"])
def test_a_serializers_type_name_is_checked_as_a_name_and_nothing_is_written(kind, error, target):
    """A type name over the 32 characters of its column, or with a NUL or lone surrogate, is
    refused on every database as the saver refuses such a channel name (it was a DataError on
    PostgreSQL, truncated by MariaDB, stored whole by SQLite)."""
    saver = CortexCheckpointSaver(scope=ACME, agent_id=AGENT)
    config = _config(uuid.uuid4())
    stored = _put(saver, config)  # the thread and a checkpoint to write to
    serde = _TypedSerde(saver.serde, kind, values_only=target == "blob")
    typed = CortexCheckpointSaver(scope=ACME, agent_id=AGENT, serde=serde)
    counts = (Checkpoint.objects.count(), CheckpointBlob.objects.count())
    with pytest.raises(error) as caught:
        if target == "write":
            typed.put_writes(
                {"configurable": {**config["configurable"], "checkpoint_id": stored}},
                [("a", 1)],
                "task",
            )
        else:
            checkpoint = empty_checkpoint()
            values = {"c": 1} if target == "blob" else {}
            checkpoint["channel_values"] = values
            versions = {key: saver.get_next_version(None, None) for key in values}
            typed.put(config, checkpoint, {"source": "loop", "step": 1}, versions)
    assert caught.value.field == "type"
    assert (Checkpoint.objects.count(), CheckpointBlob.objects.count()) == counts
    assert not CheckpointWrite.objects.exists()


@pytest.mark.parametrize("value", [float("nan"), "nul \x00", {1, 2}])
def test_metadata_that_is_not_storable_json_is_refused_and_writes_nothing(value):
    saver = CortexCheckpointSaver(scope=ACME, agent_id=AGENT)
    checkpoint = empty_checkpoint()
    with pytest.raises(InvalidMetadata):
        saver.put(_config(uuid.uuid4()), checkpoint, {"step": 0, "bad": [value]}, {})
    assert not Session.objects.exists()


def test_an_archived_thread_reads_and_refuses_writes():
    saver = CortexCheckpointSaver(scope=ACME, agent_id=AGENT)
    thread_id = uuid.uuid4()
    first = _put(saver, _config(thread_id), {"k": "v"})
    services.archive_session(scope=ACME, session_id=thread_id)
    assert saver.get_tuple(_config(thread_id)) is not None
    with pytest.raises(SessionArchived):
        _put(saver, _config(thread_id), {"k": "w"}, parent=first)
    with pytest.raises(SessionArchived):
        saver.put_writes(_config(thread_id, checkpoint_id=first), [("ch", 1)], "task")


def test_an_expired_thread_is_hidden_and_refuses_writes():
    """docs/design.md §18.1: an expired session is gone for every read and write until the
    sweep deletes it, through the saver too."""
    saver = CortexCheckpointSaver(scope=ACME, agent_id=AGENT)
    thread_id = uuid.uuid4()
    first = _put(saver, _config(thread_id), {"k": "v"})
    Session.objects.filter(pk=thread_id).update(expires_at=timezone.now() - timedelta(seconds=5))
    assert saver.get_tuple(_config(thread_id)) is None
    assert list(saver.list(None)) == []
    with pytest.raises(SessionNotFound):
        _put(saver, _config(thread_id), {"k": "w"}, parent=first)
    with pytest.raises(SessionNotFound):
        saver.put_writes(_config(thread_id, checkpoint_id=first), [("ch", 1)], "task")
    assert Checkpoint.objects.count() == 1  # nothing written


def test_deleting_the_session_deletes_its_checkpoints_blobs_and_writes():
    saver = CortexCheckpointSaver(scope=ACME, agent_id=AGENT)
    thread_id = uuid.uuid4()
    first = _put(saver, _config(thread_id), {"messages": [HumanMessage("hi")]})
    saver.put_writes(_config(thread_id, checkpoint_id=first), [("ch", 1)], "task")
    services.delete_session(scope=ACME, session_id=thread_id)
    for model in (Checkpoint, CheckpointBlob, CheckpointWrite):
        assert not model.objects.exists()
    assert saver.get_tuple(_config(thread_id)) is None


def test_delete_thread_deletes_the_session():
    saver = CortexCheckpointSaver(scope=ACME, agent_id=AGENT)
    thread_id = uuid.uuid4()
    _put(saver, _config(thread_id), {"messages": [HumanMessage("hi")]})
    saver.delete_thread(str(thread_id))
    assert not Session.objects.filter(pk=thread_id).exists()
    assert not Message.objects.exists()
    saver.delete_thread("not-a-uuid")  # a missing thread: nothing, as LangGraph's savers do


@pytest.mark.concurrent_db
@pytest.mark.django_db(transaction=True)
def test_example_runs_two_turns_and_mirrors_four_messages():
    outcome = main(scope=ALICE, agent_id=AGENT)
    assert outcome["answers"] == ["San Francisco.", "California."]
    assert outcome["second_turn_prompt"] == [
        "Which city is the Golden Gate Bridge in?",
        "San Francisco.",
        "And which state?",
    ]
    assert (outcome["message_count"], outcome["last_message"]) == (4, "California.")


@async_test
async def test_an_async_graph_run_checkpoints_and_mirrors():
    saver = CortexCheckpointSaver(scope=ACME, agent_id=AGENT)
    graph = chat_graph(saver, ["Hello!"])
    config = await athread_config(scope=ALICE, agent_id=AGENT)
    result = await graph.ainvoke({"messages": [HumanMessage("Hi")]}, config)
    assert result["messages"][-1].content == "Hello!"
    state = await graph.aget_state(config)
    assert [m.content for m in state.values["messages"]] == ["Hi", "Hello!"]
    session = await services.aget_session(
        scope=ALICE, session_id=config["configurable"]["thread_id"]
    )
    assert (session.message_count, session.last_message) == (2, "Hello!")


def test_the_admin_lists_and_shows_checkpoints_with_their_thread(client):
    saver = CortexCheckpointSaver(scope=ACME, agent_id=AGENT)
    thread_id = uuid.uuid4()
    _put(saver, _config(thread_id, scope=ALICE), {"k": "v"})
    admin = get_user_model().objects.create_superuser("root", "root@example.com", "pw")
    client.force_login(admin)
    listing = client.get(reverse("admin:cortex_langgraph_checkpoint_changelist"))
    assert listing.status_code == 200
    assert str(thread_id) in listing.content.decode()
    assert ALICE in listing.content.decode()
    row = Checkpoint.objects.get()
    page = client.get(reverse("admin:cortex_langgraph_checkpoint_change", args=[row.pk]))
    assert page.status_code == 200
    assert row.checkpoint_id in page.content.decode()


def test_the_admin_deletes_checkpoints_only_with_their_session(client):
    """A checkpoint alone is never deleted in the admin (it would leave its writes behind);
    deleting its session takes it along."""
    saver = CortexCheckpointSaver(scope=ACME, agent_id=AGENT)
    thread_id = uuid.uuid4()
    _put(saver, _config(thread_id), {"k": "v"})
    admin = get_user_model().objects.create_superuser("root", "root@example.com", "pw")
    client.force_login(admin)
    row = Checkpoint.objects.get()
    delete = reverse("admin:cortex_langgraph_checkpoint_delete", args=[row.pk])
    assert client.post(delete, {"post": "yes"}).status_code == 403
    listing = client.get(reverse("admin:cortex_langgraph_checkpoint_changelist"))
    assert "delete_selected" not in listing.content.decode()
    assert Checkpoint.objects.count() == 1
    session_delete = reverse("admin:cortex_sessions_session_delete", args=[thread_id])
    assert client.post(session_delete, {"post": "yes"}).status_code == 302
    assert not Session.objects.filter(pk=thread_id).exists()
    assert not Checkpoint.objects.exists()


@pytest.mark.parametrize("bad", ["a\x00b", "a\ud800b"], ids=["NUL", "lone surrogate"])
def test_a_name_no_database_can_store_is_refused_before_anything_is_written(bad):
    """A NUL (PostgreSQL stores none) or a lone surrogate (no database encodes one) in a
    namespace, a task id or path, a read's checkpoint id or a list's ``before`` is a coded
    InvalidInput, never a raw database error, on every database."""
    saver = CortexCheckpointSaver(scope=ACME, agent_id=AGENT)
    thread_id = uuid.uuid4()
    first = _put(saver, _config(thread_id), {"k": "v"})
    with pytest.raises(InvalidInput):
        _put(saver, {"configurable": {"thread_id": str(thread_id), "checkpoint_ns": bad}}, {})
    with pytest.raises(InvalidInput):
        saver.put_writes(_config(thread_id, checkpoint_id=first), [("ch", 1)], bad)
    with pytest.raises(InvalidInput):
        saver.put_writes(_config(thread_id, checkpoint_id=first), [("ch", 1)], "t", task_path=bad)
    with pytest.raises(InvalidInput):
        saver.get_tuple(_config(thread_id, checkpoint_id=bad))
    with pytest.raises(InvalidInput):
        list(saver.list(_config(thread_id), before=_config(thread_id, checkpoint_id=bad)))
    assert Checkpoint.objects.count() == 1 and not CheckpointWrite.objects.exists()
