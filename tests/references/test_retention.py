from __future__ import annotations

import re

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from cortex_sessions.references import (
    InvalidReferenceConfig,
    ReferenceBudgetExceeded,
    SourceMessage,
    build_snapshot,
    is_cut_point,
    min_shortened_cost,
    omission_marker,
    project_surface,
    retain_snapshot,
    shorten_text,
    split_window,
    tag_safe_json,
    utf8_len,
)
from cortex_sessions.references import retention as retention_module
from tests.references.strategies import (
    PROPERTY,
    sessions,
    sessions_and_budgets,
    text_message,
    tricky_text,
)

MARKER = re.compile(r"\[… omitted (\d+) UTF-8 bytes …\]")


def size(snapshot) -> int:
    return utf8_len(tag_safe_json(snapshot.as_json()))


def snapshot_or_none(messages, budget, **kwargs):
    try:
        return build_snapshot(messages, session_id="S", max_bytes=budget, **kwargs)
    except ReferenceBudgetExceeded:
        return None


def chat(count: int, text: str = "x" * 50) -> list[SourceMessage]:
    return [
        text_message(seq, *(("user", "user") if seq % 2 else ("assistant", "assistant")), text)
        for seq in range(1, count + 1)
    ]


# -- examples -------------------------------------------------------------------------------------


def test_big_budget_keeps_the_whole_surface_unchanged():
    messages = [*chat(4), text_message(5, "tool", "user", "tool output")]
    snapshot = build_snapshot(messages, session_id="S", label="Plans", cwd="/w", max_bytes=65_536)
    assert snapshot.as_json() == {
        "session_id": "S",
        "label": "Plans",
        "cwd": "/w",
        "captured_through_seq": 5,
        "conversation": [m.as_entry() for m in project_surface(messages)],
    }
    assert snapshot.stats.as_dict() == {
        "compacted": False,
        "original_messages": 4,
        "retained_messages": 4,
        "omitted_messages": 0,
        "omitted_bytes": 0,
        "truncated": False,
    }


def test_label_defaults_to_the_session_id_in_the_snapshot():
    assert build_snapshot(chat(1), session_id="S", max_bytes=1000).label == "S"


def test_session_without_messages_gives_an_empty_conversation():
    snapshot = build_snapshot([], session_id="S", max_bytes=1000)
    assert snapshot.conversation == []
    assert snapshot.captured_through_seq == 0
    assert not snapshot.stats.compacted


def test_oldest_messages_are_dropped_first_and_nothing_is_shortened_while_that_suffices():
    messages = chat(10)
    full = size(build_snapshot(messages, session_id="S", max_bytes=100_000))
    snapshot = build_snapshot(messages, session_id="S", max_bytes=full - 1)
    assert snapshot.retained_seqs == tuple(range(2, 11))
    assert snapshot.stats.compacted
    assert not snapshot.stats.truncated
    assert snapshot.stats.omitted_messages == 1
    assert snapshot.stats.omitted_bytes == 0


def test_checkpoint_and_newest_are_kept_when_everything_between_is_dropped():
    messages = [text_message(1, "user", "checkpoint", "summary"), *chat(20)[1:]]
    snapshot = build_snapshot(messages, session_id="S", max_bytes=300)
    assert snapshot.retained_seqs[0] == 1
    assert snapshot.retained_seqs[-1] == 20
    assert size(snapshot) <= 300


def test_the_longest_mandatory_text_is_shortened_first():
    messages = [
        text_message(1, "user", "checkpoint", "s" * 5000),
        text_message(2, "assistant", "assistant", "short answer"),
    ]
    snapshot = build_snapshot(messages, session_id="S", max_bytes=1000)
    checkpoint, newest = snapshot.conversation
    assert newest["text"] == "short answer"
    assert checkpoint["text"].startswith("sss")
    assert checkpoint["text"].endswith("sss")
    (omitted,) = MARKER.findall(checkpoint["text"])
    kept = len(checkpoint["text"]) - len(omission_marker(int(omitted)))
    assert int(omitted) == snapshot.stats.omitted_bytes == 5000 - kept
    assert snapshot.stats.truncated and snapshot.stats.compacted
    assert 1000 - 5 <= size(snapshot) <= 1000  # uses the room it has


def test_messages_without_text_count_as_omitted_but_do_not_compact():
    messages = [
        text_message(1, "user", "user", "list the files"),
        SourceMessage(2, "assistant", "assistant", [{"type": "tool_use", "name": "ls"}]),
        text_message(3, "tool", "user", "a.txt"),
        text_message(4, "assistant", "assistant", "a.txt"),
    ]
    stats = build_snapshot(messages, session_id="S", max_bytes=10_000).stats
    assert (stats.original_messages, stats.retained_messages, stats.omitted_messages) == (3, 2, 1)
    assert not stats.compacted


def test_fixed_fields_that_cannot_fit_are_budget_exceeded():
    with pytest.raises(ReferenceBudgetExceeded):
        build_snapshot([], session_id="S", label="L" * 200, max_bytes=100)


def test_mandatory_messages_that_cannot_fit_even_shortened_are_budget_exceeded():
    messages = [
        text_message(1, "user", "checkpoint", "c" * 1000),
        text_message(2, "assistant", "assistant", "n" * 1000),
    ]
    fixed = utf8_len(tag_safe_json(build_snapshot([], session_id="S", max_bytes=1000).as_json()))
    with pytest.raises(ReferenceBudgetExceeded):
        build_snapshot(messages, session_id="S", max_bytes=fixed + 60)


@pytest.mark.parametrize("budget", [0, -5, True, 1.5, "65536", None])
def test_budget_that_is_not_a_positive_int_is_invalid_config(budget):
    with pytest.raises(InvalidReferenceConfig):
        build_snapshot(chat(1), session_id="S", max_bytes=budget)


def test_lazy_retention_stops_reading_once_the_budget_is_full():
    pulled = []

    def newest_first():
        for seq in range(100_000, 0, -1):
            pulled.append(seq)
            yield text_message(seq, "user", "user", "m" * 100)

    snapshot = retain_snapshot(
        session_id="S",
        label=None,
        cwd=None,
        captured_through_seq=100_000,
        checkpoint=None,
        newest_first=newest_first(),
        window_count=100_000,
        max_bytes=4096,
    )
    assert len(pulled) == snapshot.stats.retained_messages + 1
    assert snapshot.stats.original_messages == 100_000
    assert snapshot.stats.omitted_messages == 100_000 - snapshot.stats.retained_messages
    assert snapshot.stats.compacted


def test_retention_serializes_each_message_a_bounded_number_of_times(monkeypatch):
    calls = []
    real = retention_module.tag_safe_json

    def counting(value):
        calls.append(1)
        return real(value)

    monkeypatch.setattr(retention_module, "tag_safe_json", counting)
    build_snapshot(chat(2000, "y" * 20), session_id="S", max_bytes=50_000)
    assert len(calls) <= 2 * 2000 + 10


def test_stale_window_count_is_raised_to_what_was_read():
    snapshot = retain_snapshot(
        session_id="S",
        label=None,
        cwd=None,
        captured_through_seq=3,
        checkpoint=None,
        newest_first=list(reversed(chat(3))),
        window_count=1,
        max_bytes=10_000,
    )
    assert snapshot.stats.original_messages == 3
    assert snapshot.stats.omitted_messages == 0


@pytest.mark.parametrize(
    "newest_first",
    [
        [
            text_message(1, "user", "user", "a"),
            text_message(2, "user", "user", "b"),
        ],  # oldest first
        [text_message(9, "user", "user", "a")],  # above captured_through_seq
        [text_message(2, "tool", "user", "a")],  # not conversation
        [text_message(2, "user", "checkpoint", "a")],  # a newer checkpoint
    ],
)
def test_lazy_input_breaking_its_contract_is_a_value_error(newest_first):
    with pytest.raises(ValueError):
        retain_snapshot(
            session_id="S",
            label=None,
            cwd=None,
            captured_through_seq=5,
            checkpoint=None,
            newest_first=newest_first,
            window_count=2,
            max_bytes=10_000,
        )


def test_shorten_text_never_cuts_inside_a_zwj_emoji_sequence():
    family = "👨\u200d👩\u200d👧\u200d👦"
    text = family * 40
    result = shorten_text(text, 100)
    head = text[: result.head]
    tail = text[len(text) - result.tail :]
    assert len(head) % len(family) == 0
    assert len(tail) % len(family) == 0
    assert result.text == head + omission_marker(result.omitted_bytes) + tail


# -- properties -----------------------------------------------------------------------------------


@PROPERTY
@given(
    sessions_and_budgets(),
    st.integers(-50, 50),
    st.one_of(st.none(), tricky_text),
    st.one_of(st.none(), tricky_text),
)
def test_serialized_snapshot_never_exceeds_the_budget(case, shift, label, cwd):
    messages, budget = case
    budget = max(1, budget + shift)
    snapshot = snapshot_or_none(messages, budget, label=label, cwd=cwd)
    if snapshot is not None:
        assert size(snapshot) <= budget
        for entry in snapshot.conversation:
            entry["text"].encode("utf-8")  # valid Unicode: no lone surrogates


@PROPERTY
@given(sessions_and_budgets())
def test_budget_exceeded_only_when_fixed_fields_or_mandatory_messages_cannot_fit(case):
    messages, budget = case
    surface = project_surface(messages)
    fixed = build_snapshot([], session_id="S", max_bytes=10**9).as_json()
    fixed["captured_through_seq"] = messages[-1].seq if messages else 0
    mandatory = {m.seq: m for m in surface if m.is_checkpoint or m is surface[-1]}.values()
    lowest = (
        utf8_len(tag_safe_json(fixed))
        + sum(
            utf8_len(tag_safe_json({"role": m.role, "text": ""})) + min_shortened_cost(m.text)
            for m in mandatory
        )
        + max(0, len(mandatory) - 1)
    )
    snapshot = snapshot_or_none(messages, budget)
    assert (snapshot is None) == (lowest > budget)


@PROPERTY
@given(sessions_and_budgets())
def test_retained_messages_are_the_checkpoint_and_a_newest_suffix(case):
    messages, budget = case
    snapshot = snapshot_or_none(messages, budget)
    assume(snapshot is not None)
    surface = project_surface(messages)
    seqs = [m.seq for m in surface]
    retained = list(snapshot.retained_seqs)
    if surface:
        assert retained[-1] == seqs[-1]  # the newest is always kept
    if surface and surface[0].is_checkpoint:
        assert retained[0] == seqs[0]  # so is the checkpoint
        retained, seqs = retained[1:], seqs[1:]
    if retained:
        assert retained == seqs[len(seqs) - len(retained) :]
    stats = snapshot.stats
    assert stats.retained_messages == len(snapshot.conversation)
    assert stats.original_messages == split_window(messages).window_count
    assert stats.omitted_messages == stats.original_messages - stats.retained_messages
    dropped_with_text = len(surface) - stats.retained_messages
    assert stats.compacted == (dropped_with_text > 0 or stats.truncated)


@PROPERTY
@given(sessions_and_budgets())
def test_shortened_texts_keep_head_and_tail_and_count_omitted_bytes_exactly(case):
    messages, budget = case
    snapshot = snapshot_or_none(messages, budget)
    assume(snapshot is not None)
    originals = {m.seq: m.text for m in project_surface(messages)}
    total = 0
    for seq, entry in zip(snapshot.retained_seqs, snapshot.conversation, strict=True):
        original, text = originals[seq], entry["text"]
        if text == original:
            continue
        match = MARKER.search(text)
        assert match is not None
        head, tail = text[: match.start()], text[match.end() :]
        assert original.startswith(head) and original.endswith(tail)
        middle = original[len(head) : len(original) - len(tail)]
        assert utf8_len(middle) == int(match.group(1))
        assert is_cut_point(original, len(head))
        assert is_cut_point(original, len(original) - len(tail))
        total += int(match.group(1))
    assert snapshot.stats.omitted_bytes == total
    assert snapshot.stats.truncated == (total > 0)


@PROPERTY
@given(sessions())
def test_a_big_enough_budget_keeps_everything_unchanged(messages):
    snapshot = build_snapshot(messages, session_id="S", max_bytes=10**7)
    assert snapshot.conversation == [m.as_entry() for m in project_surface(messages)]
    assert not snapshot.stats.compacted
    assert not snapshot.stats.truncated
    assert snapshot.stats.omitted_bytes == 0


@PROPERTY
@given(tricky_text, st.data())
def test_shorten_text_fits_its_allowance_and_cuts_only_between_characters(text, data):
    cost = utf8_len(tag_safe_json(text)) - 2
    lowest = min_shortened_cost(text, cost)
    allowance = data.draw(st.integers(lowest, max(lowest, cost + 5)))
    result = shorten_text(text, allowance)
    assert utf8_len(tag_safe_json(result.text)) - 2 <= allowance
    head, tail = text[: result.head], text[len(text) - result.tail :]
    if result.omitted_bytes or result.text != text:
        assert result.text == head + omission_marker(result.omitted_bytes) + tail
        assert result.omitted_bytes == utf8_len(text) - utf8_len(head) - utf8_len(tail)
        assert result.head + result.tail < len(text)
    assert is_cut_point(text, result.head)
    assert is_cut_point(text, len(text) - result.tail)
    result.text.encode("utf-8")


@pytest.mark.parametrize(
    ("text", "index"),
    [
        ("e\u0301x", 1),  # before a combining mark
        ("👍🏽", 1),  # before a skin-tone modifier
        ("👩\u200d💻", 1),  # before a ZWJ
        ("👩\u200d💻", 2),  # after a ZWJ
        ("🇫🇷", 1),  # between regional indicators
        ("❤\ufe0f", 1),  # before a variation selector
        ("a\r\nb", 2),  # between CR and LF
        ("\u0915\u093f", 1),  # before a spacing mark
        ("\u1112\u1161\u11ab", 1),  # decomposed Hangul: leading consonant and vowel
        ("\u1112\u1161\u11ab", 2),  # vowel and trailing consonant
        ("\u0e01\u0e33", 1),  # Thai SARA AM is a spacing mark
        ("\u06001", 1),  # after a prepended Arabic number sign
        ("\u0915\u094d\u0937", 2),  # Devanagari conjunct: virama and the next consonant
    ],
)
def test_cut_points_never_separate_a_cluster(text, index):
    assert not is_cut_point(text, index)


def test_cut_points_between_plain_characters_are_allowed():
    assert all(is_cut_point("ab中😀", i) for i in range(5))
