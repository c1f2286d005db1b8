"""The database layer of session references (docs/design.md §8.3-§8.8): candidates, preparation from
stored sessions, durable append — on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import random
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection, transaction
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from cortex_sessions import services
from cortex_sessions.exceptions import InvalidFilter, SessionNotFound
from cortex_sessions.models import Message, Session
from cortex_sessions.references import (
    CLOSE_TAG,
    OPEN_TAG,
    CancelToken,
    Deadline,
    InvalidReference,
    InvalidReferenceConfig,
    ReferenceBudgetExceeded,
    ReferenceCancelled,
    ReferenceReadFailed,
    SelfReference,
    SessionReferenceInput,
    SourceMessage,
    TooManyReferences,
    build_snapshot,
    format_mention,
    parse_references,
    tag_safe_json,
)
from cortex_sessions.references.service import (
    ReadStats,
    append_message_with_references,
    prepare_references,
    reference_candidates,
)

pytestmark = pytest.mark.django_db

SCOPE = "org=acme/user=alice"
T0 = datetime(2025, 1, 1, tzinfo=UTC)


# -- helpers --------------------------------------------------------------------------------------


def new_session(title="", cwd=None, scope=SCOPE, created_minutes=None):
    session = services.create_session(scope=scope, agent_id="agent-1", title=title, cwd=cwd)
    if created_minutes is not None:
        Session.objects.filter(pk=session.pk).update(
            created_at=T0 + timedelta(minutes=created_minutes)
        )
    return session


def add(session, *messages, scope=SCOPE):
    """Append ``(role, source, text)`` triples (or message dicts) through the service."""
    items = [
        m if isinstance(m, dict) else {"role": m[0], "source": m[1], "content": m[2]}
        for m in messages
    ]
    return services.append_messages(scope=scope, session_id=session.pk, messages=items)


def bulk_messages(session, specs):
    """Insert raw rows quickly: ``specs`` is a list of ``(role, source, content)``; returns the
    rows as :class:`SourceMessage` in seq order."""
    rows = [
        Message(
            session=session,
            agent_id=session.agent_id,
            scope=session.scope,
            seq=seq,
            role=role,
            source=source,
            content=content,
        )
        for seq, (role, source, content) in enumerate(specs, start=1)
    ]
    Message.objects.bulk_create(rows, batch_size=500)
    Session.objects.filter(pk=session.pk).update(last_seq=len(rows), message_count=len(rows))
    return [SourceMessage(r.seq, r.role, r.source, r.content) for r in rows]


def text(value):
    return [{"type": "text", "text": value}]


def snapshots(prepared):
    """The snapshot objects inside the one context's prompt."""
    (context,) = prepared.contexts
    prompt = context["content"][0]["text"]
    body = prompt[prompt.index(OPEN_TAG) + len(OPEN_TAG) : prompt.index(CLOSE_TAG)]
    return json.loads(body)


def prepare(current, content="see", references=(), **kwargs):
    return prepare_references(
        scope=kwargs.pop("scope", SCOPE),
        session_id=current.pk,
        content=content,
        references=references,
        **kwargs,
    )


@pytest.fixture
def current():
    return new_session("current", cwd="/work/app")


@pytest.fixture
def source():
    session = new_session("Source plan", cwd="/work/app")
    add(
        session,
        ("user", "user", "How do we ship?"),
        ("assistant", "host", "In three steps."),
    )
    return session


# -- preparation: happy paths ---------------------------------------------------------------------


@pytest.mark.parametrize("references", [(), None])
def test_message_without_references_has_no_context_and_readable_content(current, references):
    prepared = prepare(current, "just text", references=references)
    assert prepared.content == text("just text")
    assert prepared.contexts == []


def test_mention_in_a_text_block_becomes_readable_and_yields_one_context(current, source):
    mention = format_mention("Plan", str(source.pk))
    prepared = prepare(
        current, [{"type": "text", "text": f"compare {mention}"}, {"type": "image", "url": "x"}]
    )
    assert prepared.content == [
        {"type": "text", "text": "compare @Plan"},
        {"type": "image", "url": "x"},
    ]
    (snapshot,) = snapshots(prepared)
    assert snapshot == {
        "session_id": str(source.pk),
        "label": "Plan",
        "cwd": "/work/app",
        "captured_through_seq": 2,
        "conversation": [
            {"role": "user", "text": "How do we ship?"},
            {"role": "assistant", "text": "In three steps."},
        ],
    }
    (context,) = prepared.contexts
    assert context["role"] == "user"
    assert context["source"]["kind"] == "session-reference"
    assert context["source"]["references"][0]["input_index"] == 0


def test_explicit_reference_without_label_is_labelled_with_its_id(current, source):
    prepared = prepare(current, references=[{"session_id": str(source.pk)}])
    assert snapshots(prepared)[0]["label"] == str(source.pk)


def test_explicit_references_come_first_and_duplicates_are_dropped_first_wins(current, source):
    other = new_session("other")
    add(other, ("user", "user", "hi"))
    mentions = f"{format_mention('again', str(source.pk))} {format_mention('O', str(other.pk))}"
    prepared = prepare(
        current,
        mentions,
        references=[SessionReferenceInput(str(source.pk), "explicit"), str(source.pk)],
    )
    refs = prepared.contexts[0]["source"]["references"]
    assert [(r["session_id"], r["label"], r["input_index"]) for r in refs] == [
        (str(source.pk), "explicit", 0),
        (str(other.pk), "O", 3),
    ]
    assert prepared.content == text("@again @O")


def test_differently_spelled_ids_of_one_session_are_one_reference(current, source):
    spellings = [str(source.pk).upper(), source.pk.hex, f"{{{source.pk}}}"]
    prepared = prepare(current, references=spellings)
    (snapshot,) = snapshots(prepared)
    assert snapshot["session_id"] == str(source.pk)


def test_referenced_session_beneath_the_callers_scope_can_be_read(current):
    deeper = new_session("deeper", scope=f"{SCOPE}/project=x")
    add(deeper, ("user", "user", "deep"), scope=f"{SCOPE}/project=x")
    prepared = prepare(current, references=[str(deeper.pk)])
    assert snapshots(prepared)[0]["conversation"] == [{"role": "user", "text": "deep"}]


def test_several_references_share_one_aggregated_context_in_input_order(current, source):
    other = new_session("other")
    add(other, ("assistant", "host", "other text"))
    prepared = prepare(current, references=[str(other.pk), str(source.pk)])
    assert len(prepared.contexts) == 1
    assert [s["session_id"] for s in snapshots(prepared)] == [str(other.pk), str(source.pk)]


# -- projection from stored rows ------------------------------------------------------------------


def test_surface_starts_at_the_newest_checkpoint_and_keeps_only_conversation_text(current):
    session = new_session("mixed")
    add(
        session,
        ("user", "user", "before the old checkpoint"),
        ("user", "checkpoint", "old summary"),
        ("assistant", "host", "between checkpoints"),
        ("user", "checkpoint", "newest summary"),
        ("system", "host", "system prompt"),
        ("user", "user", "question"),
        ("tool", "host", "tool output"),
        ("user", "host", "host-injected note"),
        ("user", "session-reference", "an earlier reference context"),
        {"role": "assistant", "content": [{"type": "tool_use", "name": "ls", "input": {}}]},
        ("assistant", "host", "answer"),
        ("tool", "host", "trailing tool result"),
    )
    prepared = prepare(current, references=[str(session.pk)])
    (snapshot,) = snapshots(prepared)
    assert snapshot["captured_through_seq"] == 12
    assert snapshot["conversation"] == [
        {"role": "user", "text": "newest summary"},
        {"role": "user", "text": "question"},
        {"role": "assistant", "text": "answer"},
    ]
    stats = prepared.contexts[0]["source"]["references"][0]
    # checkpoint, question, the tool-only assistant turn, answer
    assert (stats["original_messages"], stats["retained_messages"]) == (4, 3)
    assert (stats["omitted_messages"], stats["compacted"]) == (1, False)


def test_referenced_session_without_messages_gives_an_empty_conversation(current):
    empty = new_session("empty")
    (snapshot,) = snapshots(prepare(current, references=[str(empty.pk)]))
    assert (snapshot["captured_through_seq"], snapshot["conversation"]) == (0, [])


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("budget", [700, 2_000, 65_536])
def test_database_path_matches_the_pure_snapshot_of_the_whole_session(current, seed, budget):
    rng = random.Random(seed)
    kinds = [
        ("user", "user"),
        ("assistant", "host"),
        ("tool", "host"),
        ("system", "host"),
        ("user", "checkpoint"),
        ("user", "session-reference"),
    ]
    specs = []
    for _ in range(rng.randint(0, 120)):
        role, source = rng.choices(kinds, weights=[5, 6, 4, 1, 1 if seed % 2 else 0, 1])[0]
        body = "".join(rng.choice("abc é中<😀\n") for _ in range(rng.randint(0, 160)))
        content = text(body) if rng.random() > 0.1 else [{"type": "tool_use", "input": {}}]
        specs.append((role, source, content))
    session = new_session("random")
    rows = bulk_messages(session, specs)
    prepared = prepare(current, references=[SessionReferenceInput(str(session.pk), "R")])
    try:
        expected = build_snapshot(rows, session_id=str(session.pk), label="R", max_bytes=budget)
    except ReferenceBudgetExceeded:
        expected = None
    with override_settings(CORTEX_SESSIONS={"MAX_REFERENCE_BYTES": budget}):
        if expected is None:
            with pytest.raises(ReferenceBudgetExceeded):
                prepare(current, references=[SessionReferenceInput(str(session.pk), "R")])
            return
        prepared = prepare(current, references=[SessionReferenceInput(str(session.pk), "R")])
    (snapshot,) = snapshots(prepared)
    assert snapshot == expected.as_json()
    assert prepared.contexts[0]["source"]["references"][0] == {
        "session_id": str(session.pk),
        "label": "R",
        "captured_through_seq": expected.captured_through_seq,
        "input_index": 0,
        **expected.stats.as_dict(),
    }
    assert len(tag_safe_json(snapshot).encode()) <= budget


# -- errors ---------------------------------------------------------------------------------------


def test_reference_to_the_current_session_is_self_reference(current):
    with pytest.raises(SelfReference) as excinfo:
        prepare(current, f"me: {format_mention('me', str(current.pk))}")
    assert (excinfo.value.code, excinfo.value.http_status) == (
        "SESSION_REFERENCE_SELF_REFERENCE",
        400,
    )


def test_self_reference_is_recognised_in_another_spelling_of_the_id(current):
    with pytest.raises(SelfReference):
        prepare(current, references=[current.pk.hex.upper()])


@override_settings(CORTEX_SESSIONS={"MAX_REFERENCES": 2})
def test_more_distinct_references_than_max_references_is_too_many(current):
    ids = [str(new_session(f"s{n}").pk) for n in range(3)]
    with pytest.raises(TooManyReferences) as excinfo:
        prepare(current, references=ids)
    assert (excinfo.value.code, excinfo.value.http_status) == ("SESSION_REFERENCE_TOO_MANY", 400)
    prepared = prepare(current, references=[ids[0], ids[1], ids[0]])  # dupes do not count
    assert len(snapshots(prepared)) == 2


def test_missing_and_out_of_scope_sessions_fail_identically(current):
    elsewhere = new_session("secret", scope="org=other/user=bob")
    add(elsewhere, ("user", "user", "secret text"), scope="org=other/user=bob")
    failures = []
    for session_id in (str(uuid.uuid4()), str(elsewhere.pk)):
        with pytest.raises(ReferenceReadFailed) as excinfo:
            prepare(current, references=[SessionReferenceInput(session_id, "x")])
        error = excinfo.value
        failures.append((error.code, error.http_status, str(error)))
    assert failures == [("SESSION_REFERENCE_READ_FAILED", 404, str(failures[0][2]))] * 2


@pytest.mark.parametrize("session_id", ["not-a-uuid", "\x00", f"{uuid.uuid4()}\x00", "12345"])
def test_a_session_id_that_is_not_a_uuid_is_a_malformed_reference_not_a_missing_one(
    current, session_id
):
    with pytest.raises(InvalidReference, match=r"references\[1\] has a session_id that is not"):
        prepare(current, references=[str(new_session("s").pk), {"session_id": session_id}])
    with pytest.raises(InvalidReference, match="a mention has a session_id that is not") as excinfo:
        prepare(current, content=f"see {format_mention('x', session_id)}")
    assert (excinfo.value.code, excinfo.value.http_status) == (
        "SESSION_REFERENCE_INVALID_REFERENCE",
        400,
    )


def test_session_in_a_sibling_scope_with_a_shared_prefix_is_not_readable(current):
    sibling = new_session("sibling", scope="org=acme/user=alice2")
    with pytest.raises(ReferenceReadFailed):
        prepare(current, references=[str(sibling.pk)])


def test_budget_that_cannot_hold_the_fixed_fields_is_budget_exceeded(current, source):
    with (
        override_settings(CORTEX_SESSIONS={"MAX_REFERENCE_BYTES": 60}),
        pytest.raises(ReferenceBudgetExceeded) as excinfo,
    ):
        prepare(current, references=[str(source.pk)])
    assert (excinfo.value.code, excinfo.value.http_status) == (
        "SESSION_REFERENCE_BUDGET_EXCEEDED",
        413,
    )


def test_a_foreign_current_session_is_not_found_before_the_body_is_read(current):
    foreign = services.create_session(scope="org=other/user=9", agent_id="a")
    with pytest.raises(SessionNotFound):
        prepare(foreign, "see @[x](cortex-session:!!)", references=5)


def test_malformed_explicit_mention_is_invalid_reference(current):
    with pytest.raises(InvalidReference) as excinfo:
        prepare(current, "see @[x](cortex-session:!!)")
    assert excinfo.value.code == "SESSION_REFERENCE_INVALID_REFERENCE"


@pytest.mark.parametrize(
    "references",
    [
        [{"id": "x"}],
        [{"session_id": "x", "extra": 1}],
        [42],
        [{"session_id": ""}],
        "abc",
        5,
        True,
        1.5,
        {"session_id": "x"},
        [{"session_id": "x", "label": "nul\x00"}],
        [SessionReferenceInput("x", "nul\x00")],
    ],
)
def test_malformed_reference_input_is_invalid_reference(current, references):
    with pytest.raises(InvalidReference):
        prepare(current, references=references)


@pytest.mark.parametrize(
    "config", [{"MAX_REFERENCES": 4}, {"MAX_REFERENCES": 0}, {"MAX_REFERENCE_BYTES": 0}]
)
def test_invalid_settings_are_invalid_config_even_without_references(current, config):
    with override_settings(CORTEX_SESSIONS=config), pytest.raises(InvalidReferenceConfig) as exc:
        prepare(current, "plain")
    assert exc.value.code == "SESSION_REFERENCE_INVALID_CONFIG"


def test_cancelled_token_is_cancelled(current, source):
    token = CancelToken()
    token.cancel()
    with pytest.raises(ReferenceCancelled) as excinfo:
        prepare(current, references=[str(source.pk)], cancel_token=token)
    assert (excinfo.value.code, excinfo.value.http_status) == ("SESSION_REFERENCE_CANCELLED", 503)


def test_expired_deadline_is_cancelled(current, source):
    with pytest.raises(ReferenceCancelled):
        prepare(current, references=[str(source.pk)], deadline=Deadline.in_seconds(-1))


class CancelAfter(CancelToken):
    """A token that reads as cancelled from its ``n``-th check on, counting the checks."""

    def __init__(self, n):
        super().__init__()
        self.n = n
        self.checks = 0

    @property
    def cancelled(self):
        self.checks += 1
        return self.checks >= self.n


def test_cancellation_is_checked_between_read_chunks(current):
    big = new_session("big")
    bulk_messages(big, [("assistant", "host", text("x" * 50))] * 400)
    token = CancelAfter(10**9)
    prepare(current, references=[str(big.pk)], cancel_token=token)
    checks = token.checks
    assert checks >= 3  # before the reference, before each chunk, at the end
    with pytest.raises(ReferenceCancelled):
        prepare(current, references=[str(big.pk)], cancel_token=CancelAfter(checks - 1))


def test_preparing_in_a_session_outside_the_scope_is_session_not_found(source):
    elsewhere = new_session("x", scope="org=other/user=bob")
    with pytest.raises(SessionNotFound):
        prepare(elsewhere, references=[str(source.pk)])


# -- bounded reads --------------------------------------------------------------------------------


def long_session(count, *, size=300):
    session = new_session(f"long {count}")
    kinds = [("user", "user"), ("assistant", "host"), ("tool", "host")]
    bulk_messages(
        session,
        [(*kinds[n % 3], text(f"{n:06d} " + "lorem ipsum " * (size // 12))) for n in range(count)],
    )
    return session


@override_settings(CORTEX_SESSIONS={"MAX_REFERENCE_BYTES": 4_096})
def test_a_long_session_with_a_small_budget_reads_a_bounded_number_of_rows(current):
    big = long_session(2_000)
    stats = ReadStats()
    with CaptureQueriesContext(connection) as queries:
        prepared = prepare(current, references=[str(big.pk)], read_stats=stats)
    (snapshot,) = snapshots(prepared)
    retained = len(snapshot["conversation"])
    assert 5 <= retained <= 15
    assert stats.rows <= retained + 8  # the retained ones, the one that did not fit, a few more
    assert stats.text_bytes <= 2 * 4_096
    assert len(queries) <= 12
    assert prepared.contexts[0]["source"]["references"][0]["original_messages"] == 1_334


@override_settings(CORTEX_SESSIONS={"MAX_REFERENCE_BYTES": 4_096})
def test_rows_read_depend_on_the_budget_not_on_the_session_length(current):
    reads = []
    for count in (200, 2_000):
        stats = ReadStats()
        prepare(current, references=[str(long_session(count).pk)], read_stats=stats)
        reads.append((stats.rows, stats.queries))
    assert reads[0] == reads[1]


# -- candidates -----------------------------------------------------------------------------------


def ids(candidates):
    return [c["session_id"] for c in candidates]


def test_candidates_are_scope_limited_and_exclude_the_current_session(current):
    mine = new_session("mine")
    deeper = new_session("deeper", scope=f"{SCOPE}/project=x")
    new_session("theirs", scope="org=other/user=bob")
    new_session("sibling", scope="org=acme/user=alice2")
    found = ids(reference_candidates(scope=SCOPE, session_id=current.pk))
    assert sorted(found) == sorted([str(mine.pk), str(deeper.pk)])


def test_candidates_rank_same_cwd_then_no_cwd_then_others_most_recent_first(current):
    made = {
        "other-old": new_session("a", cwd="/elsewhere", created_minutes=1),
        "none-old": new_session("b", cwd=None, created_minutes=2),
        "same-old": new_session("c", cwd="/work/app", created_minutes=3),
        "other-new": new_session("d", cwd="/elsewhere", created_minutes=10),
        "empty-new": new_session("e", cwd="", created_minutes=11),
        "same-new": new_session("f", cwd="/work/app", created_minutes=12),
    }
    found = reference_candidates(scope=SCOPE, session_id=current.pk)
    names = {str(s.pk): name for name, s in made.items()}
    assert [names[c["session_id"]] for c in found] == [
        "same-new",
        "same-old",
        "empty-new",
        "none-old",
        "other-new",
        "other-old",
    ]
    assert [c["same_workspace"] for c in found] == [True, True, False, False, False, False]


def test_candidates_of_a_session_without_cwd_put_cwdless_sessions_first(current):
    plain = new_session("plain", cwd=None, created_minutes=1)
    placed = new_session("placed", cwd="/x", created_minutes=2)
    cwdless = new_session("cwdless", cwd=None, created_minutes=0)
    found = reference_candidates(scope=SCOPE, session_id=plain.pk)
    assert ids(found) == [str(cwdless.pk), str(current.pk), str(placed.pk)]
    assert not any(c["same_workspace"] for c in found)


def test_candidates_with_equal_created_at_are_ordered_by_descending_id(current):
    first, second = new_session("x", created_minutes=5), new_session("y", created_minutes=5)
    found = ids(reference_candidates(scope=SCOPE, session_id=current.pk, query="", limit=50))
    assert found == sorted([str(first.pk), str(second.pk)], reverse=True)


def test_candidates_match_title_cwd_or_id_case_insensitively_never_message_text(current):
    by_title = new_session("Apollo launch")
    by_cwd = new_session("x", cwd="/srv/APOLLO")
    by_text = new_session("unrelated")
    add(by_text, ("user", "user", "apollo is mentioned only here"))
    assert sorted(
        ids(reference_candidates(scope=SCOPE, session_id=current.pk, query=" apOLLo "))
    ) == sorted([str(by_title.pk), str(by_cwd.pk)])
    piece = str(by_text.pk)[-12:].upper()
    assert ids(reference_candidates(scope=SCOPE, session_id=current.pk, query=piece)) == [
        str(by_text.pk)
    ]
    dashed = str(by_text.pk)[9:23]  # spans dashes
    assert ids(reference_candidates(scope=SCOPE, session_id=current.pk, query=dashed)) == [
        str(by_text.pk)
    ]


def test_candidate_filter_treats_like_wildcards_literally(current):
    literal = new_session("100% done_ok")
    new_session("1000 done ok")
    found = ids(reference_candidates(scope=SCOPE, session_id=current.pk, query="0% done_"))
    assert found == [str(literal.pk)]


def test_candidates_honour_limit_and_clamp_it_to_candidate_limit(current):
    for n in range(5):
        new_session(f"s{n}", created_minutes=n)
    assert len(reference_candidates(scope=SCOPE, session_id=current.pk, limit=2)) == 2
    with override_settings(CORTEX_SESSIONS={"CANDIDATE_LIMIT": 3}):
        assert len(reference_candidates(scope=SCOPE, session_id=current.pk)) == 3
        assert len(reference_candidates(scope=SCOPE, session_id=current.pk, limit=100)) == 3


@pytest.mark.parametrize("limit", [0, -1, True, "2"])
def test_candidate_limit_below_one_or_not_an_int_is_invalid_filter(current, limit):
    with pytest.raises(InvalidFilter):
        reference_candidates(scope=SCOPE, session_id=current.pk, limit=limit)


@pytest.mark.parametrize("query", ["a\x00b", 5, None])
def test_candidate_query_with_nul_or_not_a_string_is_invalid_filter(current, query):
    with pytest.raises(InvalidFilter):
        reference_candidates(scope=SCOPE, session_id=current.pk, query=query)


def test_invalid_candidate_limit_setting_is_invalid_config(current):
    with (
        override_settings(CORTEX_SESSIONS={"CANDIDATE_LIMIT": 0}),
        pytest.raises(InvalidReferenceConfig),
    ):
        reference_candidates(scope=SCOPE, session_id=current.pk)


def test_candidate_has_label_epoch_ms_and_a_mention_that_parses_back(current):
    titled = new_session("Plan ] \\ B", cwd="/work/app", created_minutes=0)
    untitled = new_session("", created_minutes=1)
    found = {c["session_id"]: c for c in reference_candidates(scope=SCOPE, session_id=current.pk)}
    candidate = found[str(titled.pk)]
    assert candidate == {
        "session_id": str(titled.pk),
        "label": "Plan ] \\ B",
        "cwd": "/work/app",
        "created_at": int(T0.timestamp() * 1000),
        "same_workspace": True,
        "mention": format_mention("Plan ] \\ B", str(titled.pk)),
    }
    assert found[str(untitled.pk)]["label"] == str(untitled.pk)
    parsed = parse_references(candidate["mention"])
    assert parsed.references == [SessionReferenceInput(str(titled.pk), "Plan ] \\ B")]


def test_candidates_for_a_session_outside_the_scope_is_session_not_found(current):
    elsewhere = new_session("x", scope="org=other/user=bob")
    with pytest.raises(SessionNotFound):
        reference_candidates(scope=SCOPE, session_id=elsewhere.pk)


# -- durable append -------------------------------------------------------------------------------


def test_append_stores_readable_message_then_its_context_in_one_write(current, source):
    mention = format_mention("Plan", str(source.pk))
    result = append_message_with_references(
        scope=SCOPE, session_id=current.pk, content=f"use {mention}", metadata={"k": 1}
    )
    user, context = result.messages
    assert (user.seq, user.role, user.source) == (1, "user", "user")
    assert user.content == text("use @Plan")
    assert user.metadata == {"k": 1}
    assert (context.seq, context.role, context.source) == (2, "user", "session-reference")
    assert context.metadata["source"]["references"][0]["session_id"] == str(source.pk)
    prepared = prepare(current, f"use {mention}")
    assert context.content == prepared.contexts[0]["content"]
    assert context.metadata == {"source": prepared.contexts[0]["source"]}
    assert (result.session.message_count, result.session.last_message) == (2, "use @Plan")


def test_append_without_references_stores_only_the_message(current):
    result = append_message_with_references(scope=SCOPE, session_id=current.pk, content="hi")
    assert [(m.role, m.source) for m in result.messages] == [("user", "user")]


def test_stored_snapshot_does_not_change_when_the_referenced_session_does(current, source):
    result = append_message_with_references(
        scope=SCOPE, session_id=current.pk, content="x", references=[str(source.pk)]
    )
    stored = Message.objects.get(pk=result.messages[1].pk)
    before = (stored.content, stored.metadata)
    add(source, ("assistant", "host", "a later answer"))
    services.update_session(scope=SCOPE, session_id=source.pk, title="renamed", cwd="/moved")
    services.delete_message(scope=SCOPE, session_id=source.pk, seq=1)
    stored.refresh_from_db()
    assert (stored.content, stored.metadata) == before
    fresh = snapshots(prepare(current, references=[str(source.pk)]))[0]
    assert fresh["conversation"][-1]["text"] == "a later answer"
    assert "a later answer" not in stored.content[0]["text"]


def test_a_failing_reference_writes_nothing(current, source):
    with pytest.raises(ReferenceReadFailed):
        append_message_with_references(
            scope=SCOPE,
            session_id=current.pk,
            content="x",
            references=[str(source.pk), str(uuid.uuid4())],
        )
    current.refresh_from_db()
    assert (current.message_count, current.last_seq) == (0, 0)
    assert not Message.objects.filter(session=current).exists()


# -- PostgreSQL: indexes and the read snapshot ----------------------------------------------------


@pytest.mark.postgres_only
def test_reference_reads_use_the_partial_indexes_on_postgresql(current):
    session = long_session(300)
    messages = Message.objects.filter(session=session)
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
    checkpoint_plan = (
        messages.filter(role="user", source="checkpoint", seq__lte=300).order_by("-seq").explain()
    )
    from cortex_sessions.counters import CONVERSATION_Q

    chunk_plan = (
        messages.filter(CONVERSATION_Q, seq__gt=0, seq__lte=300).order_by("-seq")[:8].explain()
    )
    assert "cortex_msg_checkpoint_idx" in checkpoint_plan
    assert "cortex_msg_conversation_idx" in chunk_plan


@pytest.mark.postgres_only
@pytest.mark.django_db(transaction=True)
def test_outside_a_transaction_postgresql_reads_in_one_repeatable_read_snapshot():
    current = new_session("current")
    source = new_session("source")
    add(source, ("user", "user", "hello"))
    with CaptureQueriesContext(connection) as queries:
        prepared = prepare(current, references=[str(source.pk)])
    statements = [q["sql"] for q in queries]
    assert any("REPEATABLE READ" in sql for sql in statements)
    assert snapshots(prepared)[0]["conversation"] == [{"role": "user", "text": "hello"}]


@pytest.mark.django_db(transaction=True)
def test_under_manual_transaction_management_reads_in_the_callers_transaction():
    # The host turned autocommit off and wrote first: the preparation must not take the
    # transaction for its own (on PostgreSQL a SET TRANSACTION after a query is refused, and
    # one that went through would have left the host's transaction READ ONLY).
    source = new_session("source")
    add(source, ("user", "user", "hello"))
    transaction.set_autocommit(False)
    try:
        current = new_session("current")  # the host's write, not yet committed
        prepared = prepare(current, references=[str(source.pk)])
        services.append_messages(
            scope=SCOPE, session_id=current.pk, messages=[{"role": "user", "content": "after"}]
        )
        transaction.commit()
    finally:
        transaction.set_autocommit(True)
    assert snapshots(prepared)[0]["conversation"] == [{"role": "user", "text": "hello"}]
    assert Session.objects.get(pk=current.pk).message_count == 1
