from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from cortex_sessions.references import (
    CandidateRow,
    SessionReferenceInput,
    build_candidate,
    epoch_ms,
    parse_references,
    rank_candidates,
)

T0 = datetime(2025, 1, 1, tzinfo=UTC)


def row(session_id, cwd=None, minutes=0, title=""):
    return CandidateRow(session_id, title, cwd, T0 + timedelta(minutes=minutes))


def test_same_cwd_first_then_no_cwd_then_others_most_recent_first_within_a_rank():
    rows = [
        row("other-old", "/elsewhere", 1),
        row("none-old", None, 2),
        row("same-old", "/here", 3),
        row("other-new", "/elsewhere", 10),
        row("none-new", "", 11),
        row("same-new", "/here", 12),
    ]
    ranked = rank_candidates(rows, current_cwd="/here")
    assert [r.session_id for r in ranked] == [
        "same-new",
        "same-old",
        "none-new",
        "none-old",
        "other-new",
        "other-old",
    ]


def test_without_a_current_cwd_sessions_without_cwd_come_first():
    ranked = rank_candidates([row("with", "/x", 5), row("without", None, 0)], current_cwd=None)
    assert [r.session_id for r in ranked] == ["without", "with"]


def test_equal_times_are_ordered_by_descending_id():
    ranked = rank_candidates([row("a"), row("c"), row("b")], current_cwd=None)
    assert [r.session_id for r in ranked] == ["c", "b", "a"]


def test_candidate_has_label_epoch_ms_workspace_flag_and_a_parsable_mention():
    candidate = build_candidate(row("s1", "/here", title="Fix ] bug"), current_cwd="/here")
    assert candidate["session_id"] == "s1"
    assert candidate["label"] == "Fix ] bug"
    assert candidate["cwd"] == "/here"
    assert candidate["created_at"] == 1_735_689_600_000
    assert candidate["same_workspace"] is True
    parsed = parse_references(candidate["mention"])
    assert parsed.references == [SessionReferenceInput("s1", "Fix ] bug")]


def test_untitled_candidate_is_labelled_with_its_id():
    candidate = build_candidate(row("s1", "/other", title="  "), current_cwd="/here")
    assert candidate["label"] == "s1"
    assert candidate["same_workspace"] is False


def test_epoch_ms_is_exact_for_aware_naive_and_pre_epoch_times():
    plus_two = timezone(timedelta(hours=2))
    assert epoch_ms(datetime(1970, 1, 1, 2, 0, 0, 1500, tzinfo=plus_two)) == 1
    assert epoch_ms(datetime(1970, 1, 1, 0, 0, 0, 2999)) == 2  # naive means UTC
    assert epoch_ms(datetime(1969, 12, 31, 23, 59, 59, 999_500, tzinfo=UTC)) == -1
