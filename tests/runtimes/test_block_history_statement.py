"""The whole-history page statement on PostgreSQL ships the records as they are stored and
leaves putting each message's text back to the client (``integrations.block_history``,
docs/design.md §19.2, §19.3).

No timing here (speed lives in ``bench/``): these pin the division of labour whose loss made
the LangChain and Pydantic AI whole-history reads 1.6x and 2.5x their peers. When
the statement rebuilt every record (``jsonb_set`` at a path cast from each block's
``"text_at"``, checked with a regular expression and walked with ``#>``), PostgreSQL spent
three to four times the server CPU of the records alone; the client puts the text back with a
dict assignment per record (:func:`cortex_sessions.integrations.blocks.with_text`)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("langchain_core")
pytest.importorskip("pydantic_ai")

from django.db import connection
from django.test.utils import CaptureQueriesContext
from langchain_core.messages import AIMessage, HumanMessage, messages_from_dict
from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart

from cortex_sessions import services
from cortex_sessions.integrations import pydantic_ai
from cortex_sessions.integrations.blocks import TEXT_AT, stored_record
from cortex_sessions.integrations.langchain import CortexChatMessageHistory
from cortex_sessions.integrations.langchain.messages import MESSAGE_BLOCK_TYPE as LANGCHAIN_TYPE
from cortex_sessions.models import Message

pytestmark = [pytest.mark.django_db, pytest.mark.postgres_only]

SCOPE = "org=acme/user=statement"
AGENT = "bot"
#: What the page statement must not do per row: rebuild a record, cast or match a path.
PER_ROW_REBUILD = ("jsonb_set", "jsonb_insert", "translate(", "::text[]", "#>", " ~ ")


def _langchain_session() -> CortexChatMessageHistory:
    pk = services.create_session(scope=SCOPE, agent_id=AGENT).pk
    history = CortexChatMessageHistory(scope=SCOPE, agent_id=AGENT, session_id=pk)
    history.add_messages([HumanMessage(f"question {n}", id=f"h{n}") for n in range(3)])
    history.add_messages([AIMessage("an answer", id="a")])
    return history


def _page_row(history: CortexChatMessageHistory) -> tuple:
    return _page_row_of(history, 4)


def _page_row_of(history: CortexChatMessageHistory, length: int) -> tuple:
    assert len(history.messages) == length  # the pinned session checked once
    with CaptureQueriesContext(connection) as captured:
        assert len(history.messages) == length
    (query,) = captured.captured_queries  # one statement: the page
    with connection.cursor() as cursor:
        cursor.execute(query["sql"])
        return query["sql"], cursor.fetchone()


def _lines(lines: str) -> list[list]:
    """The page's ``lines``: each ``[record, text_at as JSON text or None, text or None]``
    (a line: the two, then the record, joined by tabs)."""
    lines_ = [json.loads("[" + line.replace("\t", ",") + "]") for line in lines.split("\n")]
    return [[record, path, text] for path, text, record in lines_]  # path: parsed here


def test_the_page_statement_ships_the_records_as_stored_and_the_text_beside_them():
    history = _langchain_session()
    _, (count, _, lines, mixed) = _page_row(history)
    stored = [
        m.content for m in Message.objects.filter(session_id=history.session_id).order_by("seq")
    ]
    assert count == 4 and mixed is False
    # The records without their text, exactly as stored: PostgreSQL rebuilt none of them.
    records = [record for record, _, _ in _lines(lines)]
    assert records == [content[-1]["message"] for content in stored]
    assert all("content" not in record["data"] for record in records)
    # Beside each, its text_at (the client checks each distinct path's text once) and the
    # text of its message's first block, for the client.
    assert [[path, text] for _, path, text in _lines(lines)] == [
        [content[-1][TEXT_AT], content[0]["text"]] for content in stored
    ]
    assert all(content[-1]["type"] == LANGCHAIN_TYPE for content in stored)


def test_no_line_is_cut_by_a_newline_in_a_record():
    """PostgreSQL prints ``jsonb`` with every control character escaped, so the page's lines
    (joined by a newline) are its records, however many newlines, tabs or carriage returns
    their keys, strings and texts hold."""
    pk = services.create_session(scope=SCOPE, agent_id=AGENT).pk
    history = CortexChatMessageHistory(scope=SCOPE, agent_id=AGENT, session_id=pk)
    messages = [
        HumanMessage("line one\nline two\r\n\tend\n", id="n\n1"),
        AIMessage(
            [{"type": "text", "text": "a\nb"}, {"type": "text", "text": "\n"}],
            additional_kwargs={"key\nwith\tbreaks\u2028": ["\n", {"\r": "\x1f\n"}]},
        ),
        HumanMessage("\n", id="only a newline"),
    ]
    history.add_messages(messages)
    assert history.messages == messages
    _, (count, _, lines, _) = _page_row_of(history, 3)
    assert count == 3 and len(lines.split("\n")) == 3


def test_the_page_statement_rebuilds_no_record_per_row():
    """The plan's expressions (``EXPLAIN VERBOSE``) hold no record rebuild and no path cast or
    match: per row PostgreSQL only picks the block, its record and the text."""
    history = _langchain_session()
    sql, _ = _page_row(history)
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (VERBOSE) " + sql)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "string_agg" in plan  # the page's aggregate is in the plan read
    assert [word for word in PER_ROW_REBUILD if word in plan] == []


def test_a_page_of_old_rows_ships_no_texts():
    """Records written before the text was stored once carry no ``"text_at"``: each line's
    path and text are ``null`` and the client puts nothing back."""
    pk = services.create_session(scope=SCOPE, agent_id=AGENT).pk
    messages = [
        ModelRequest(parts=[UserPromptPart("hello")]),
        ModelResponse(parts=[TextPart("hi")]),
    ]
    pydantic_ai.save_messages(scope=SCOPE, agent_id=AGENT, messages=messages, session_id=pk)
    for message in Message.objects.filter(session_id=pk):  # as an older writer stored them
        block = message.content[-1]
        record = stored_record(block, "message", message.content)
        content = [*message.content[:-1], {"type": block["type"], "message": record}]
        Message.objects.filter(pk=message.pk).update(content=content)
    with CaptureQueriesContext(connection) as captured:
        loaded = pydantic_ai.load_history(scope=SCOPE, agent_id=AGENT, session_id=pk)
    assert [m.parts[0].content for m in loaded] == ["hello", "hi"]
    (query,) = captured.captured_queries
    with connection.cursor() as cursor:
        cursor.execute(query["sql"])
        row = cursor.fetchone()
    assert [line[1:] for line in _lines(row[2])] == [[None, None]] * 2  # no path, no text


def test_a_path_equal_as_json_to_the_adapters_but_not_of_their_form_is_left_alone():
    """``0.0`` equals ``0`` as JSON (and as ``jsonb``); the rule takes only integers, so
    ``["data", "content", 0.0, "text"]`` leaves the record as it is on PostgreSQL too."""
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
    assert history.messages == messages_from_dict([record])
