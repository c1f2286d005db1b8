"""A block of an adapter's type that keeps no record the runtime reads — a host's block posted
through the API: ``{"type": "langchain_message", "message": null}``, ``"x"``, ``[]``, ``{}``, a
record of no known type, no record at all, JSON text that is not JSON — is no record: its
message reads as another writer's (by role, from its text; a ``tool`` message, or one without
text, is skipped), on every database and both read paths, whether the page's other messages
are the adapter's or not, within a page and across a page's end (docs/design.md §19.2, §19.3;
docs/langchain.md, docs/pydantic-ai.md: "never makes the history unreadable")."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest

pytest.importorskip("langchain_core")
pytest.importorskip("pydantic_ai")

from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from pydantic_ai.messages import (
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    TextPart,
    UserPromptPart,
)

from cortex_sessions import services
from cortex_sessions.integrations import block_history, pydantic_ai
from cortex_sessions.integrations.langchain import CortexChatMessageHistory
from cortex_sessions.integrations.langchain import history as langchain_history
from cortex_sessions.integrations.langchain import messages as langchain_messages

pytestmark = pytest.mark.django_db

SCOPE = "org=acme/user=bad-records"
AGENT = "bot"

#: What a host may put in the block beside its ``type`` (each passes the content rule).
BAD = {
    "null": {"message": None},
    "a string": {"message": "x"},
    "a list": {"message": []},
    "an empty object": {"message": {}},
    "no known type": {"message": {"type": "nonsense"}},
    "a known type, bad data": {"message": {"type": "human", "data": [], "kind": "request"}},
    # LangChain reads it, as a RemoveMessage: an instruction to a reducer, never stored by
    # the adapter, so not a message of the history
    "a RemoveMessage": {"message": {"type": "remove", "data": {"id": "x"}}},
    "no record": {},
    "JSON text not JSON": {"message_json": "not json"},
    "JSON text of null": {"message_json": "null"},
    "JSON text a number": {"message_json": 5},
    "null with a text_at": {"message": None, "text_at": ["data", "content"]},
    "an empty object with a text_at": {"message": {}, "text_at": ["parts", 0, "content"]},
}


def _langchain(pk: uuid.UUID) -> tuple[Callable[[list[str]], None], Callable[[], list[Any]]]:
    history = CortexChatMessageHistory(scope=SCOPE, agent_id=AGENT, session_id=pk)

    def write(texts: list[str]) -> None:
        history.add_messages([AIMessage(text, id=text) for text in texts])

    return write, lambda: history.messages


def _pydantic(pk: uuid.UUID) -> tuple[Callable[[list[str]], None], Callable[[], list[Any]]]:
    def write(texts: list[str]) -> None:
        messages = [ModelResponse(parts=[TextPart(text)]) for text in texts]
        pydantic_ai.save_messages(scope=SCOPE, agent_id=AGENT, messages=messages, session_id=pk)

    return write, lambda: pydantic_ai.load_history(scope=SCOPE, agent_id=AGENT, session_id=pk)


ADAPTERS = {
    "langchain": (_langchain, langchain_messages.MESSAGE_BLOCK_TYPE),
    "pydantic_ai": (_pydantic, pydantic_ai.MESSAGE_BLOCK_TYPE),
}


def _summary(record: Any) -> tuple[str, str]:
    """``(kind, text)`` of a read message, whichever runtime's."""
    if isinstance(record, BaseMessage):
        return record.type, record.text
    (part,) = record.parts
    return record.kind, part.content


def _post_bad(pk: uuid.UUID, block_type: str, bad: dict[str, Any], roles: list[str]) -> None:
    """One message per role, each a text block then the bad block, as a host posts them."""
    services.append_messages(
        scope=SCOPE,
        session_id=pk,
        messages=[
            {
                "role": role,
                "content": [{"type": "text", "text": f"bad {role}"}, {"type": block_type, **bad}],
            }
            for role in roles
        ],
    )


def _read_both(monkeypatch: pytest.MonkeyPatch, read: Callable[[], list[Any]]) -> tuple:
    with transaction.atomic():  # a database error would end the test's transaction
        fast = read()
    with monkeypatch.context() as patched:
        patched.setattr(block_history, "serves", lambda scope: False)
        slow = read()
    return fast, slow


def _untimed(records: list[Any]) -> list[Any]:
    """Records as JSON without the ``timestamp`` a message read as another writer's gets (the
    time of the read)."""
    out = []
    for record in records:
        if isinstance(record, BaseMessage):
            out.append(record.model_dump(mode="json"))
            continue
        dumped = ModelMessagesTypeAdapter.dump_python([record], mode="json")[0]
        dumped.pop("timestamp", None)
        for part in dumped["parts"]:
            part.pop("timestamp", None)
        out.append(dumped)
    return out


@pytest.fixture(params=sorted(ADAPTERS))
def adapter(request: pytest.FixtureRequest) -> tuple[Any, str]:
    return ADAPTERS[request.param]


@pytest.mark.parametrize("bad", BAD.values(), ids=BAD.keys())
def test_a_bad_block_reads_as_another_writers_message(monkeypatch, adapter, bad):
    """Good and bad messages in one page: the bad ``user`` and ``assistant`` messages read by
    their text, the bad ``tool`` one is skipped, the adapter's own read back as they were."""
    make, block_type = adapter
    pk = services.create_session(scope=SCOPE, agent_id=AGENT).pk
    write, read = make(pk)
    write(["first"])
    _post_bad(pk, block_type, bad, ["user", "tool", "assistant"])
    write(["last"])
    fast, slow = _read_both(monkeypatch, read)
    assert _untimed(fast) == _untimed(slow)
    ai, human = ("ai", "human") if block_type == "langchain_message" else ("response", "request")
    assert [_summary(record) for record in fast] == [
        (ai, "first"),
        (human, "bad user"),
        (ai, "bad assistant"),
        (ai, "last"),
    ]


@pytest.mark.parametrize("page", [1, 2, 3, 4])
def test_bad_blocks_across_a_pages_end(monkeypatch, adapter, page):
    """Pages of good records only, of bad ones only, and of both, each alone or beside another
    writer's message: each page reads the same as the services' pages."""
    make, block_type = adapter
    monkeypatch.setattr(block_history, "PAGE", page)
    monkeypatch.setattr(langchain_history, "_PAGE", page)
    monkeypatch.setattr(pydantic_ai, "_PAGE", page)
    pk = services.create_session(scope=SCOPE, agent_id=AGENT).pk
    write, read = make(pk)
    write(["a", "b"])
    _post_bad(pk, block_type, BAD["null"], ["user"])
    write(["c"])
    _post_bad(pk, block_type, BAD["no known type"], ["assistant", "user"])
    services.append_messages(
        scope=SCOPE, session_id=pk, messages=[{"role": "user", "content": "d"}]
    )
    _post_bad(pk, block_type, BAD["no record"], ["assistant"])
    write(["e", "f", "g"])
    fast, slow = _read_both(monkeypatch, read)
    assert _untimed(fast) == _untimed(slow)
    assert [_summary(record)[1] for record in fast] == [
        "a",
        "b",
        "bad user",
        "c",
        "bad assistant",
        "bad user",
        "d",
        "bad assistant",
        "e",
        "f",
        "g",
    ]


@pytest.mark.postgres_only
def test_a_page_of_good_records_takes_one_statement(adapter):
    """The fallback costs only a page that needs it: good records alone, one statement."""
    make, _ = adapter
    pk = services.create_session(scope=SCOPE, agent_id=AGENT).pk
    write, read = make(pk)
    write(["a", "b", "c"])
    read()  # the pinned session checked once
    with CaptureQueriesContext(connection) as captured:
        assert [_summary(record)[1] for record in read()] == ["a", "b", "c"]
    assert len(captured.captured_queries) == 1


def test_from_cortex_reads_a_bad_block_by_its_text():
    content = [{"type": "text", "text": "hi"}, {"type": "langchain_message", "message": None}]
    assert langchain_messages.from_cortex("user", content) == HumanMessage("hi")
    assert langchain_messages.from_cortex("tool", content) is None
    content = [{"type": "text", "text": "hi"}, {"type": "pydantic_ai_message", "message": "x"}]
    read = pydantic_ai.from_cortex("user", content)
    assert isinstance(read, ModelRequest) and read.parts == [
        UserPromptPart("hi", timestamp=read.parts[0].timestamp)
    ]
