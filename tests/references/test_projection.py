from __future__ import annotations

import random

from hypothesis import given

from cortex_sessions.references import (
    SourceMessage,
    project_surface,
    split_window,
    surface_message,
)
from tests.references.strategies import PROPERTY, sessions, text_message


def entries(surface):
    return [(m.seq, m.as_entry()) for m in surface]


def test_surface_starts_at_the_newest_checkpoint():
    messages = [
        text_message(1, "user", "user", "old question"),
        text_message(2, "user", "checkpoint", "first summary"),
        text_message(3, "assistant", "assistant", "between"),
        text_message(4, "user", "checkpoint", "second summary"),
        text_message(5, "assistant", "assistant", "answer"),
    ]
    assert entries(project_surface(messages)) == [
        (4, {"role": "user", "text": "second summary"}),
        (5, {"role": "assistant", "text": "answer"}),
    ]
    assert project_surface(messages)[0].is_checkpoint


def test_surface_without_checkpoint_holds_every_conversation_message():
    messages = [
        text_message(1, "user", "user", "q"),
        text_message(2, "assistant", "assistant", "a"),
    ]
    assert [m.seq for m in project_surface(messages)] == [1, 2]


def test_tool_system_host_and_reference_messages_never_appear():
    messages = [
        text_message(1, "system", "user", "system prompt"),
        text_message(2, "user", "user", "question"),
        text_message(3, "tool", "user", "tool output"),
        text_message(4, "user", "host", "injected by host"),
        text_message(5, "user", "session-reference", "<referenced-sessions>…"),
        text_message(6, "assistant", "assistant", "answer"),
    ]
    assert [m.seq for m in project_surface(messages)] == [2, 6]


def test_messages_without_text_are_left_out():
    messages = [
        SourceMessage(1, "assistant", "assistant", [{"type": "tool_use", "name": "ls"}]),
        SourceMessage(2, "user", "user", [{"type": "image", "url": "x"}]),
        text_message(3, "assistant", "assistant", ""),
        text_message(4, "assistant", "assistant", "done"),
    ]
    assert [m.seq for m in project_surface(messages)] == [4]


def test_text_is_the_text_blocks_joined_by_newlines():
    message = SourceMessage(
        1,
        "assistant",
        "assistant",
        [{"type": "text", "text": "a"}, {"type": "tool_use"}, {"type": "text", "text": "b"}],
    )
    assert surface_message(message).text == "a\nb"


def test_lone_surrogates_in_stored_text_become_replacement_characters():
    assert surface_message(text_message(1, "user", "user", "a\ud800b")).text == "a\ufffdb"


def test_projection_does_not_depend_on_input_order():
    messages = [
        text_message(
            seq, "user" if seq % 2 else "assistant", "user" if seq % 2 else "assistant", "t"
        )
        for seq in range(1, 30)
    ]
    shuffled = messages[:]
    random.Random(4).shuffle(shuffled)
    assert project_surface(shuffled) == project_surface(messages)


@PROPERTY
@given(sessions())
def test_window_counts_conversation_messages_from_the_checkpoint_on(messages):
    window = split_window(messages)
    floor = window.checkpoint.seq if window.checkpoint else 0
    expected = [
        m
        for m in messages
        if m.seq >= floor
        and (m.role == "assistant" or (m.role == "user" and m.source in ("user", "checkpoint")))
    ]
    assert window.window_count == len(expected)
    assert window.captured_through_seq == (messages[-1].seq if messages else 0)
    assert [m.seq for m in window.newest_first] == sorted(
        (m.seq for m in expected if m.seq > floor), reverse=True
    )
