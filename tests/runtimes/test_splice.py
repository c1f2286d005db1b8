"""Pydantic AI's whole-history read on PostgreSQL puts a message's text back into the stored
message's JSON text where it has the usual shape (``block_history.Splice``) and parses the
rest: both give what the services' path gives (``blocks.with_text``'s rule), whatever a host
posted — the key already there, an empty first part, a text that is no string, a path the
adapter writes elsewhere — and in order when the two kinds alternate (docs/design.md §19.3)."""

from __future__ import annotations

import pytest

pytest.importorskip("pydantic_ai")

from django.db import transaction
from pydantic_ai.messages import (
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    UserPromptPart,
)

from cortex_sessions import services
from cortex_sessions.integrations import block_history, pydantic_ai

pytestmark = pytest.mark.django_db

SCOPE = "org=acme/user=splice"
AGENT = "bot"
STAMP = "2026-01-01T00:00:00Z"
REQUEST = {
    "kind": "request",
    "parts": [{"part_kind": "user-prompt", "content": "own", "timestamp": STAMP}],
}


def _post(pk, record, text_at, text="posted"):
    block = {"type": pydantic_ai.MESSAGE_BLOCK_TYPE, "message": record, "text_at": text_at}
    head = [{"type": "text", "text": text}] if isinstance(text, str) else [text]
    services.append_messages(
        scope=SCOPE, session_id=pk, messages=[{"role": "user", "content": [*head, block]}]
    )


def _both(monkeypatch, pk):
    def read():
        with transaction.atomic():
            return pydantic_ai.load_history(scope=SCOPE, agent_id=AGENT, session_id=pk)

    fast = read()
    with monkeypatch.context() as patched:
        patched.setattr(block_history, "serves", lambda scope: False)
        slow = read()
    return fast, slow


def _dump(records):
    return ModelMessagesTypeAdapter.dump_python(records, mode="json")


def _untimed(records):
    """Records as JSON without the timestamps a message read as another writer's gets (the
    time of the read)."""
    dumped = _dump(records)
    for record in dumped:
        record.pop("timestamp", None)
        for part in record["parts"]:
            part.pop("timestamp", None)
    return dumped


FORGED = {
    "the key already there": (REQUEST, ["parts", 0, "content"], "posted", "own"),
    "an empty first part": (
        {"kind": "request", "parts": [{}, {"part_kind": "user-prompt", "content": "x"}]},
        ["parts", 0, "content"],
        "posted",
        None,  # not a message pydantic validates: read as another writer's
    ),
    "no text block first": (
        {"kind": "request", "parts": [{"part_kind": "user-prompt", "timestamp": STAMP}]},
        ["parts", 0, "content"],
        {"type": "note", "text": "not a text block"},
        None,
    ),
    "the path 0.0": (REQUEST, ["parts", 0.0, "content"], "posted", "own"),
    "of the usual shape, not a message": (  # spliced, then refused by validate_json
        {"kind": "request", "parts": [{"part_kind": "nonsense", "timestamp": STAMP}]},
        ["parts", 0, "content"],
        "posted",
        "posted",  # read as another writer's user message
    ),
}


@pytest.mark.parametrize("record, text_at, text, expected", FORGED.values(), ids=FORGED.keys())
def test_a_posted_block_reads_as_the_services_path_reads_it(
    monkeypatch, record, text_at, text, expected
):
    pk = services.create_session(scope=SCOPE, agent_id=AGENT).pk
    run = [ModelRequest(parts=[UserPromptPart("before")]), ModelResponse(parts=[TextPart("b")])]
    pydantic_ai.save_messages(scope=SCOPE, agent_id=AGENT, messages=run, session_id=pk)
    _post(pk, record, text_at, text)
    pydantic_ai.save_messages(scope=SCOPE, agent_id=AGENT, messages=run, session_id=pk)
    fast, slow = _both(monkeypatch, pk)
    assert _dump(fast[:2]) == _dump(run) and _dump(fast[-2:]) == _dump(run)
    if expected is None:  # no message read from the block
        assert len(fast) == len(slow) and [type(m) for m in fast] == [type(m) for m in slow]
    else:
        assert _untimed(fast) == _untimed(slow)
        assert fast[2].parts[0].content == expected


def test_messages_of_both_kinds_alternate_in_order(monkeypatch):
    """A system prompt first puts the text at ``["parts", 1, "content"]``: those messages are
    parsed, the usual ones spliced, and the history keeps its order."""
    pk = services.create_session(scope=SCOPE, agent_id=AGENT).pk
    messages = []
    for n in range(7):
        messages += [
            ModelRequest(parts=[SystemPromptPart("be brief"), UserPromptPart(f"q{n}")]),
            ModelResponse(parts=[TextPart(f"a{n}")]),
            ModelRequest(parts=[UserPromptPart(f"r{n}")]),
        ]
    pydantic_ai.save_messages(scope=SCOPE, agent_id=AGENT, messages=messages, session_id=pk)
    calls = []
    splice = pydantic_ai._SPLICE
    monkeypatch.setattr(
        pydantic_ai,
        "_SPLICE",
        block_history.Splice(
            path=splice.path,
            prefixes=splice.prefixes,
            decode_json=lambda text: calls.append(text) or splice.decode_json(text),
        ),
    )
    fast, slow = _both(monkeypatch, pk)
    assert _dump(fast) == _dump(slow) == _dump(messages)
    if block_history.serves(pydantic_ai.as_scope(SCOPE)):  # PostgreSQL: both kinds were read
        assert len(calls) == 7  # each run of two usual messages validated from its JSON text


def test_a_line_of_the_usual_shape_gets_its_text_where_with_text_puts_it():
    splice = pydantic_ai._SPLICE
    path = '["parts", 0, "content"]'
    record = '{"kind": "request", "parts": [{"part_kind": "user-prompt"}]}'
    assert splice.record(f'{path}\t"hi"\t{record}') == (
        '{"kind": "request", "parts": [{"content": "hi", "part_kind": "user-prompt"}]}'
    )
    assert splice.record(f"null\tnull\t{record}") == record
    assert splice.record(f"{path}\t5\t{record}") is None
    assert splice.record(f'{path}\t"hi"\t{{"kind": "request", "parts": [{{}}]}}') is None
    assert splice.record(f'{path}\t"hi"\t{{"a": 1, "kind": "request", "parts": [{{}}]}}') is None
