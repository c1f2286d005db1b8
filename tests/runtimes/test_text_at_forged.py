"""A ``"text_at"`` the adapters did not write — a host's block posted through the API, null, a
string, a path with odd keys, one through a missing key, one onto a key the record has — is
ignored on every database and both read paths: the record reads as it is, and one such message
never makes a history unreadable (docs/design.md §19.2; ``blocks.stored_record``)."""

from __future__ import annotations

import pytest

pytest.importorskip("langchain_core")

from django.db import transaction
from langchain_core.messages import HumanMessage, messages_from_dict

from cortex_sessions import services
from cortex_sessions.integrations import block_history
from cortex_sessions.integrations.langchain import CortexChatMessageHistory
from cortex_sessions.integrations.langchain.messages import MESSAGE_BLOCK_TYPE

pytestmark = pytest.mark.django_db

SCOPE = "org=acme/user=forger"
RECORD = {
    "type": "human",
    "data": {
        "content": "original",
        "additional_kwargs": {},
        "response_metadata": {},
        "type": "human",
        "name": None,
        "id": "x",
    },
}
MISSING = object()

FORGED = {
    "null": None,
    "a number": 5,
    "a string": "data",
    "an empty list": [],
    "an object in the path": [{"a": 1}, "content"],
    "a key with a comma": ["data", "a,b"],
    "a key with a brace": ["data", "}"],
    "a key with a quote": ["data", 'a"b'],
    "a key with a letter outside ASCII": ["data", "contént"],
    "an index last": ["data", 0],
    "an index into an object": ["data", 3, "text"],
    "a missing key on the way": ["data", "nope", "content"],
    "a key the record has": ["type"],
    "a nested key the record has": ["data", "id"],
    "a negative index": ["data", -1, "text"],
    "a float": ["data", 1.5],
}


def _history_with(text_at):
    history = CortexChatMessageHistory(scope=SCOPE, agent_id="bot")
    history.add_messages([HumanMessage("before", id="b")])
    block = {"type": MESSAGE_BLOCK_TYPE, "message": RECORD, "text_at": text_at}
    services.append_messages(
        scope=SCOPE,
        session_id=history.session_id,
        messages=[{"role": "user", "content": [{"type": "text", "text": "forged"}, block]}],
    )
    history.add_messages([HumanMessage("after", id="a")])
    return history


def _read(history, monkeypatch, fast):
    with monkeypatch.context() as patch:
        if not fast:
            patch.setattr(block_history, "serves", lambda scope: False)
        with transaction.atomic():  # a database error would end the test's transaction
            return history.messages


@pytest.mark.parametrize("text_at", FORGED.values(), ids=FORGED.keys())
def test_a_forged_text_at_reads_the_record_as_it_is_on_both_paths(text_at, monkeypatch):
    history = _history_with(text_at)
    expected = [
        HumanMessage("before", id="b"),
        *messages_from_dict([RECORD]),
        HumanMessage("after", id="a"),
    ]
    assert _read(history, monkeypatch, fast=True) == expected
    assert _read(history, monkeypatch, fast=False) == expected


def test_the_text_goes_back_where_the_adapter_put_it(monkeypatch):
    """The control: the path the adapter writes, on a record without that key, gets the text."""
    record = {**RECORD, "data": {k: v for k, v in RECORD["data"].items() if k != "content"}}
    history = CortexChatMessageHistory(scope=SCOPE, agent_id="bot")
    block = {"type": MESSAGE_BLOCK_TYPE, "message": record, "text_at": ["data", "content"]}
    services.append_messages(
        scope=SCOPE,
        session_id=history.session_id,
        messages=[{"role": "user", "content": [{"type": "text", "text": "forged"}, block]}],
    )
    expected = [HumanMessage("forged", id="x")]
    assert _read(history, monkeypatch, fast=True) == expected
    assert _read(history, monkeypatch, fast=False) == expected


def test_a_path_the_reader_would_ignore_is_never_written():
    """The writer keeps the text in the record unless its path has the form the reader puts
    the text back by (so no text is lost to a key with other characters)."""
    from cortex_sessions.integrations.blocks import record_blocks

    value = {"data-x": {"content": "hello"}}
    blocks = record_blocks(
        "hello", MESSAGE_BLOCK_TYPE, "message", value, as_json=str, text_at=["data-x", "content"]
    )
    assert blocks[-1] == {"type": MESSAGE_BLOCK_TYPE, "message": value}
    kept = record_blocks(
        "hello",
        MESSAGE_BLOCK_TYPE,
        "message",
        {"data": {"content": "hello"}},
        as_json=str,
        text_at=["data", "content"],
    )
    assert kept[-1] == {
        "type": MESSAGE_BLOCK_TYPE,
        "message": {"data": {}},
        "text_at": ["data", "content"],
    }
