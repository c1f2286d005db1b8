"""A host's compaction (docs/context-window.md) and the LangChain and Pydantic AI reads: their
histories are the whole transcript, the covered messages included and the summary where it was
appended, as a user message (docs/langchain.md, docs/pydantic-ai.md); the context (the summary,
then what follows what it covers) is ``services.context_messages`` through ``from_cortex``, as
the docs show."""

from __future__ import annotations

import pytest

pytest.importorskip("langchain_core")
pytest.importorskip("pydantic_ai")

from langchain_core.messages import AIMessage, HumanMessage
from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart

from cortex_sessions import services
from cortex_sessions.integrations import pydantic_ai
from cortex_sessions.integrations.langchain import CortexChatMessageHistory, from_cortex

pytestmark = pytest.mark.django_db

SCOPE = "org=acme/user=compacted"
AGENT = "bot"
SUMMARY = "The user asked twice; we answered twice."


def test_langchain_reads_the_transcript_and_the_docs_context_recipe_reads_the_context():
    history = CortexChatMessageHistory(scope=SCOPE, agent_id=AGENT)
    turns = [HumanMessage("q1", id="1"), AIMessage("a1", id="2")]
    history.add_messages([*turns, HumanMessage("q2", id="3"), AIMessage("a2", id="4")])
    pk = history.session_id
    services.compact_session(scope=SCOPE, session_id=pk, through_seq=4, summary=SUMMARY)
    history.add_messages([HumanMessage("q3", id="5")])
    texts = [message.text for message in history.messages]
    assert texts == ["q1", "a1", "q2", "a2", SUMMARY, "q3"]
    assert isinstance(history.messages[4], HumanMessage)  # the summary: a user message
    window = services.context_messages(scope=SCOPE, session_id=pk)
    context = [m for row in window.messages if (m := from_cortex(row.role, row.content))]
    assert [message.text for message in context] == [SUMMARY, "q3"]


def test_pydantic_ai_reads_the_transcript_and_the_docs_context_recipe_reads_the_context():
    pk = services.create_session(scope=SCOPE, agent_id=AGENT).pk
    run = [ModelRequest(parts=[UserPromptPart("q1")]), ModelResponse(parts=[TextPart("a1")])]
    pydantic_ai.save_messages(scope=SCOPE, agent_id=AGENT, messages=run, session_id=pk)
    services.compact_session(scope=SCOPE, session_id=pk, through_seq=2, summary=SUMMARY)
    loaded = pydantic_ai.load_history(scope=SCOPE, agent_id=AGENT, session_id=pk)
    assert [message.parts[0].content for message in loaded] == ["q1", "a1", SUMMARY]
    assert isinstance(loaded[-1].parts[0], UserPromptPart)  # the summary: a user prompt
    window = services.context_messages(scope=SCOPE, session_id=pk)
    context = [
        m for row in window.messages if (m := pydantic_ai.from_cortex(row.role, row.content))
    ]
    assert [message.parts[0].content for message in context] == [SUMMARY]
