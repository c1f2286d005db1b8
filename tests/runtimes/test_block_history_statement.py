"""The whole-history page statement on PostgreSQL puts each message's text back only at the
paths the adapters write, each a branch with a constant path, and casts or matches no
``"text_at"`` per row (``integrations.block_history``, docs/design.md §19.2, §19.3).

No timing here (speed lives in ``bench/``): these pin the statement's shape whose loss made the
LangChain and Pydantic AI whole-history reads 1.6x and 2.5x their peers (issue 37). When the
statement turned every block's ``"text_at"`` into a path at run time (its text matched against
a regular expression, ``translate`` and a ``text[]`` cast, walked twice with ``#>``), PostgreSQL
spent three to four times the plain read's CPU on a page. And the statement agrees with the
Python rule (``blocks.with_text``): a path it does not know, or one equal as JSON to a path it
knows but not of the adapters' form, goes to the message-by-message read."""

from __future__ import annotations

import json
import re

import pytest

pytest.importorskip("langchain_core")
pytest.importorskip("pydantic_ai")

from django.db import connection
from django.test.utils import CaptureQueriesContext
from langchain_core.messages import AIMessage, HumanMessage, messages_from_dict
from pydantic_ai.messages import ModelRequest, ModelResponse, SystemPromptPart, UserPromptPart

from cortex_sessions import services
from cortex_sessions.integrations import pydantic_ai
from cortex_sessions.integrations.blocks import TEXT_AT, stored_record
from cortex_sessions.integrations.langchain import CortexChatMessageHistory
from cortex_sessions.integrations.langchain.messages import MESSAGE_BLOCK_TYPE as LANGCHAIN_TYPE
from cortex_sessions.models import Message

pytestmark = [pytest.mark.django_db, pytest.mark.postgres_only]

SCOPE = "org=acme/user=statement"
AGENT = "bot"


ADDED = [
    *(HumanMessage(f"question {n}", id=f"h{n}") for n in range(3)),
    # the text as a part of a content list: ["data", "content", 1, "text"]
    AIMessage(
        [{"type": "image_url", "image_url": {"url": "x"}}, {"type": "text", "text": "an answer"}],
        id="a",
    ),
]


def _langchain_history() -> CortexChatMessageHistory:
    pk = services.create_session(scope=SCOPE, agent_id=AGENT).pk
    history = CortexChatMessageHistory(scope=SCOPE, agent_id=AGENT, session_id=pk)
    history.add_messages(ADDED)
    return history


def _statements(read) -> tuple[list, list[str]]:
    """``read()`` (a second time: a pinned session is checked on its first use) and the
    statements it ran."""
    read()
    with CaptureQueriesContext(connection) as captured:
        result = read()
    return result, [query["sql"] for query in captured.captured_queries]


def test_the_statement_puts_the_text_back_at_constant_paths_only():
    history = _langchain_history()
    messages, (sql,) = _statements(lambda: history.messages)  # one statement: the page
    assert messages == ADDED
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (VERBOSE) " + sql)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "jsonb_set" in plan  # the text goes back in the statement ...
    assert "translate(" not in plan and " ~ " not in plan  # ... by no per-row match ...
    assert ")::text[]" not in plan  # ... nor cast: every path is a constant
    for path in re.findall(r"(?:#>|jsonb_set\([^,]+,) ('[^']*'::text\[\])", plan):
        assert re.fullmatch(r"'\{[A-Za-z_0-9,]+\}'::text\[\]", path)


def test_the_statement_reads_each_record_as_the_python_rule_does():
    history = _langchain_history()
    _, (sql,) = _statements(lambda: history.messages)
    with connection.cursor() as cursor:
        cursor.execute(sql)
        _, _, verbatim, mixed = cursor.fetchone()
    stored = Message.objects.filter(session_id=history.session_id).order_by("seq")
    blocks = [m.content[-1] for m in stored]
    assert mixed is False
    assert [block[TEXT_AT] for block in blocks] == [["data", "content"]] * 3 + [
        ["data", "content", 1, "text"]
    ]
    assert json.loads(verbatim) == [
        stored_record(b, "message", m.content) for b, m in zip(blocks, stored, strict=True)
    ]


def test_a_path_the_statement_does_not_know_is_read_message_by_message():
    """A Pydantic AI request whose prompt is its 17th part (16 system prompts first): the
    adapter writes ``["parts", 16, "content"]``, past the statement's paths; the page is read
    again message by message and reads back equal."""
    pk = services.create_session(scope=SCOPE, agent_id=AGENT).pk
    request = ModelRequest(
        parts=[*(SystemPromptPart(f"rule {n}") for n in range(16)), UserPromptPart("hi")]
    )
    response = ModelResponse(parts=[])
    pydantic_ai.save_messages(
        scope=SCOPE, agent_id=AGENT, messages=[request, response], session_id=pk
    )
    (stored, _) = Message.objects.filter(session_id=pk).order_by("seq")
    assert stored.content[-1][TEXT_AT] == ["parts", 16, "content"]
    loaded, statements = _statements(
        lambda: pydantic_ai.load_history(scope=SCOPE, agent_id=AGENT, session_id=pk)
    )
    assert loaded == [request, response]
    assert len(statements) == 2  # the page, then its messages one by one


def test_a_path_equal_as_json_to_a_known_one_but_not_of_its_form_is_left_alone():
    """``0.0`` equals ``0`` as JSON (and as ``jsonb``); the Python rule takes only integers, so
    the statement must not take ``["data", "content", 0.0, "text"]`` for a path it knows."""
    record = {
        "type": "ai",
        "data": {"content": [{"type": "text"}], "type": "ai", "id": "f", "additional_kwargs": {}},
    }
    block = {"type": LANGCHAIN_TYPE, "message": record, TEXT_AT: ["data", "content", 0.0, "text"]}
    pk = services.create_session(scope=SCOPE, agent_id=AGENT).pk
    services.append_messages(
        scope=SCOPE,
        session_id=pk,
        messages=[{"role": "assistant", "content": [{"type": "text", "text": "forged"}, block]}],
    )
    history = CortexChatMessageHistory(scope=SCOPE, agent_id=AGENT, session_id=pk)
    assert history.messages == messages_from_dict([record])  # the record as it is
