"""ADK's event compaction (``EventsCompactionConfig``) through ``CortexSessionService`` keeps
the transcript and becomes a cortex compaction (docs/design.md §16.5): ADK still reads every
event back (it hides the compacted ones from its model itself), and the context read
(§16.4) returns the summary and what followed."""

from __future__ import annotations

import pytest

pytest.importorskip("google.adk")

from google.adk.agents import LlmAgent
from google.adk.apps.app import App, EventsCompactionConfig
from google.adk.apps.base_events_summarizer import BaseEventsSummarizer
from google.adk.events import Event, EventActions
from google.adk.events.event_actions import EventCompaction
from google.adk.runners import Runner
from google.genai import types

from cortex_sessions import services
from cortex_sessions.integrations.adk import CortexSessionService
from cortex_sessions.models import Message
from example_project.runtimes.adk_example import ScriptedLlm, request_texts
from tests.asyncio_support import async_test

pytestmark = pytest.mark.django_db

SUMMARY = "The user asked about the bridge; it is in San Francisco, California."


class ScriptedSummarizer(BaseEventsSummarizer):
    """Summarizes any range into :data:`SUMMARY`, as ADK's LLM summarizer shapes its event."""

    def __init__(self) -> None:
        self.ranges: list[list[Event]] = []

    async def maybe_summarize_events(self, *, events: list[Event]) -> Event | None:
        self.ranges.append(events)
        compaction = EventCompaction(
            start_timestamp=events[0].timestamp,
            end_timestamp=events[-1].timestamp,
            compacted_content=types.Content(role="model", parts=[types.Part(text=SUMMARY)]),
        )
        return Event(author="user", actions=EventActions(compaction=compaction), invocation_id="c")


@async_test
async def test_adk_compaction_is_a_cortex_compaction_and_keeps_every_event():
    summarizer = ScriptedSummarizer()
    model = ScriptedLlm(replies=["San Francisco.", "California.", "Sacramento."])
    app = App(
        name="guide",
        root_agent=LlmAgent(name="guide", model=model, instruction="One line."),
        events_compaction_config=EventsCompactionConfig(
            summarizer=summarizer, compaction_interval=2, overlap_size=0
        ),
    )
    service = CortexSessionService()
    runner = Runner(app=app, session_service=service)
    session = await service.create_session(app_name="guide", user_id="u1")
    questions = ["Which city is the bridge in?", "Which state?", "Its capital?"]
    for question in questions:
        message = types.Content(role="user", parts=[types.Part(text=question)])
        async for _ in runner.run_async(user_id="u1", session_id=session.id, new_message=message):
            pass
    assert summarizer.ranges, "ADK never compacted"

    scope = service.scope_for("guide", "u1")
    rows = [m async for m in Message.objects.filter(session_id=session.id).order_by("seq")]
    summaries = [row for row in rows if row.compacts_through_seq is not None]
    assert len(summaries) == 1
    (summary,) = summaries
    assert (summary.role, summary.source) == ("user", "checkpoint")
    texts = [row.text for row in rows]
    for question in questions:
        assert question in texts  # nothing deleted

    # ADK reads every event back, the compaction event among them, as from its own stores
    stored = await service.get_session(app_name="guide", user_id="u1", session_id=session.id)
    assert sum(1 for event in stored.events if event.actions.compaction) == 1
    assert len(stored.events) == len(rows)

    # the context read: the summary, then what followed the compacted range
    window = await services.acontext_messages(scope=scope, session_id=session.id)
    assert window.messages[0].pk == summary.pk
    assert all(m.seq > summary.compacts_through_seq for m in window.messages[1:])
    assert "Its capital?" in [m.text for m in window.messages]
    assert "Which city is the bridge in?" not in [m.text for m in window.messages]
    # and ADK's model saw the summary in the last turn
    assert SUMMARY in request_texts(model.requests[-1])
