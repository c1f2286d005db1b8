"""Thread lifecycle services: fork, archive, metadata filter and merge patch, undo
(docs/design.md §11.1–§11.4), on every database."""

from __future__ import annotations

import uuid

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from cortex_sessions import services
from cortex_sessions.content import MAX_JSON_DEPTH
from cortex_sessions.exceptions import (
    InvalidFilter,
    InvalidInput,
    InvalidMetadata,
    InvalidUpToSeq,
    MessageNotFound,
    SessionArchived,
    SessionNotFound,
)
from cortex_sessions.metadata import merge_patch
from cortex_sessions.models import Message, Session

pytestmark = pytest.mark.django_db

SCOPE = "org=acme/user=1"
OTHER = "org=acme/user=2"


def _session(scope=SCOPE, agent_id="a", **kwargs):
    return services.create_session(scope=scope, agent_id=agent_id, **kwargs)


def _nested(depth, leaf=1):
    """``leaf`` inside ``depth`` objects: ``{"a": {"a": ... leaf}}``."""
    for _ in range(depth):
        leaf = {"a": leaf}
    return leaf


def _append(session, *items):
    return services.append_messages(
        scope=session.scope,
        session_id=session.pk,
        messages=[{"role": role, "content": text} for role, text in items],
    )


def _rows(session):
    return list(
        Message.objects.filter(session=session)
        .order_by("seq")
        .values_list("seq", "role", "source", "content", "metadata", "created_at")
    )


def _assert_counters_exact(session):
    session.refresh_from_db()
    rows = Message.objects.filter(session=session)
    assert session.message_count == rows.count()
    from cortex_sessions.counters import newest_conversation_text

    assert session.last_message == newest_conversation_text(rows)


@pytest.fixture
def chat():
    session = _session(title="Trip", metadata={"team": "x"}, cwd="/w")
    _append(
        session,
        ("user", "q1"),
        ("assistant", "a1"),
        ("tool", "tool output"),
        ("user", "q2"),
        ("assistant", "a2"),
    )
    session.refresh_from_db()
    return session


# -- fork (§11.1) ---------------------------------------------------------------------------------


def test_fork_copies_every_message_in_order_with_exact_counters(chat):
    fork = services.fork_session(scope=SCOPE, session_id=chat.pk)

    assert fork.pk != chat.pk
    assert (fork.agent_id, fork.scope, fork.title, fork.metadata, fork.cwd) == (
        "a",
        SCOPE,
        "Trip",
        {"team": "x"},
        "/w",
    )
    assert fork.is_default is False
    assert fork.archived_at is None
    assert fork.forked_from == chat.pk
    assert fork.forked_at_seq == 5
    assert _rows(fork) == _rows(chat)
    stored = Session.objects.get(pk=fork.pk)
    assert (stored.message_count, stored.last_seq, stored.last_message) == (5, 5, "a2")
    _assert_counters_exact(fork)


def test_fork_up_to_seq_copies_a_prefix_renumbered_from_one(chat):
    services.delete_message(scope=SCOPE, session_id=chat.pk, seq=2)  # a gap: seqs 1,3,4,5

    fork = services.fork_session(scope=SCOPE, session_id=chat.pk, up_to_seq=3)

    assert [row[0] for row in _rows(fork)] == [1, 2]
    assert [row[3][0]["text"] for row in _rows(fork)] == ["q1", "tool output"]
    stored = Session.objects.get(pk=fork.pk)
    assert (stored.message_count, stored.last_seq, stored.last_message) == (2, 2, "q1")
    assert stored.forked_at_seq == 3
    _assert_counters_exact(fork)
    # The source is untouched.
    assert [row[0] for row in _rows(chat)] == [1, 3, 4, 5]


def test_fork_at_zero_is_empty_and_takes_the_given_title_and_metadata(chat):
    fork = services.fork_session(
        scope=SCOPE, session_id=chat.pk, up_to_seq=0, title="Branch", metadata={"b": 1}
    )
    stored = Session.objects.get(pk=fork.pk)
    assert (stored.message_count, stored.last_message, stored.last_seq) == (0, "", 0)
    assert (stored.title, stored.metadata, stored.forked_at_seq) == ("Branch", {"b": 1}, 0)


def test_appending_to_a_fork_continues_after_its_copied_messages(chat):
    fork = services.fork_session(scope=SCOPE, session_id=chat.pk, up_to_seq=2)
    appended = _append(fork, ("user", "other way")).messages[0]
    assert appended.seq == 3
    _assert_counters_exact(fork)


def test_fork_of_the_default_is_not_the_default(chat):
    default, _ = services.resolve_session(scope=SCOPE, agent_id="a")
    _append(default, ("user", "hello"))
    fork = services.fork_session(scope=SCOPE, session_id=default.pk)
    assert fork.is_default is False
    assert Session.objects.filter(agent_id="a", scope=SCOPE, is_default=True).get().pk == default.pk


def test_fork_lives_at_the_source_scope_when_forked_from_a_broader_scope():
    source = _session(scope="org=acme/user=1/project=p")
    _append(source, ("user", "q"))
    fork = services.fork_session(scope="org=acme", session_id=source.pk)
    assert fork.scope == "org=acme/user=1/project=p"


def test_deleting_the_source_leaves_the_fork_naming_it(chat):
    fork = services.fork_session(scope=SCOPE, session_id=chat.pk)
    services.delete_session(scope=SCOPE, session_id=chat.pk)

    stored = Session.objects.get(pk=fork.pk)
    assert stored.forked_from == chat.pk
    assert stored.message_count == 5
    assert len(_rows(stored)) == 5


def test_an_archived_session_can_be_forked_and_the_fork_is_live(chat):
    services.archive_session(scope=SCOPE, session_id=chat.pk)
    fork = services.fork_session(scope=SCOPE, session_id=chat.pk)
    assert fork.archived_at is None
    _append(fork, ("user", "more"))


@pytest.mark.parametrize("up_to_seq", [-1, 6, 2**63, "3", 3.0, True, [1]])
def test_fork_refuses_a_fork_point_outside_the_session_and_writes_nothing(chat, up_to_seq):
    before = (Session.objects.count(), Message.objects.count())
    with pytest.raises(InvalidUpToSeq) as caught:
        services.fork_session(scope=SCOPE, session_id=chat.pk, up_to_seq=up_to_seq)
    assert caught.value.code == "invalid_up_to_seq"
    assert (Session.objects.count(), Message.objects.count()) == before


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"metadata": [1]}, InvalidMetadata),
        ({"metadata": {"a": "\x00"}}, InvalidInput),
        ({"title": "x" * 501}, InvalidInput),
        ({"title": 5}, InvalidInput),
    ],
)
def test_fork_refuses_bad_title_or_metadata_and_writes_nothing(chat, kwargs, error):
    before = (Session.objects.count(), Message.objects.count())
    with pytest.raises(error):
        services.fork_session(scope=SCOPE, session_id=chat.pk, **kwargs)
    assert (Session.objects.count(), Message.objects.count()) == before


@pytest.mark.parametrize("session_id", ["foreign", "missing", "malformed"])
def test_fork_of_a_foreign_or_missing_id_is_not_found(chat, session_id):
    foreign = _session(scope=OTHER)
    _append(foreign, ("user", "secret"))
    target = {"foreign": foreign.pk, "missing": uuid.uuid4(), "malformed": "nope"}[session_id]
    before = (Session.objects.count(), Message.objects.count())
    with pytest.raises(SessionNotFound):
        services.fork_session(scope=SCOPE, session_id=target)
    assert (Session.objects.count(), Message.objects.count()) == before


def test_fork_makes_the_same_queries_for_ten_or_a_thousand_messages():
    small, large = _session(), _session()
    _append(small, *[("user", f"m{i}") for i in range(10)])
    for start in range(0, 1000, 500):
        _append(large, *[("user", f"m{i}") for i in range(start, start + 500)])

    counts = []
    for source in (small, large):
        with CaptureQueriesContext(connection) as queries:
            services.fork_session(scope=SCOPE, session_id=source.pk)
        counts.append(len(queries))
        # The copy never reads the messages back into Python.
        message_table = Message._meta.db_table
        reads = [
            query["sql"]
            for query in queries.captured_queries
            if message_table in query["sql"] and not query["sql"].lstrip().startswith("INSERT")
        ]
        assert reads == []
    assert counts[0] == counts[1]


# -- archive (§11.2) ------------------------------------------------------------------------------


def test_archiving_the_default_demotes_it_and_resolve_makes_a_fresh_one():
    default, _ = services.resolve_session(scope=SCOPE, agent_id="a")
    archived = services.archive_session(scope=SCOPE, session_id=default.pk)
    assert archived.archived_at is not None
    assert archived.is_default is False
    fresh, created = services.resolve_session(scope=SCOPE, agent_id="a")
    assert created is True
    assert fresh.pk != default.pk


def test_an_archived_session_refuses_writes_and_changes_nothing(chat):
    services.archive_session(scope=SCOPE, session_id=chat.pk)
    before = (_rows(chat), Session.objects.filter(pk=chat.pk).values().get())
    writes = [
        lambda: _append(chat, ("user", "more")),
        lambda: services.delete_message(scope=SCOPE, session_id=chat.pk, seq=1),
        lambda: services.clear_messages(scope=SCOPE, session_id=chat.pk),
        lambda: services.delete_messages_after(scope=SCOPE, session_id=chat.pk, after_seq=2),
        lambda: services.pop_message(scope=SCOPE, session_id=chat.pk),
        lambda: services.make_default(scope=SCOPE, session_id=chat.pk),
    ]
    for write in writes:
        with pytest.raises(SessionArchived) as caught:
            write()
        assert caught.value.code == "session_archived"
    assert (_rows(chat), Session.objects.filter(pk=chat.pk).values().get()) == before
    # Reads still work.
    assert services.get_session(scope=SCOPE, session_id=chat.pk).pk == chat.pk
    assert len(services.list_messages(scope=SCOPE, session_id=chat.pk)) == 5


def test_unarchive_makes_it_writable_again_without_making_it_default(chat):
    services.archive_session(scope=SCOPE, session_id=chat.pk)
    again = services.archive_session(scope=SCOPE, session_id=chat.pk)  # idempotent
    live = services.unarchive_session(scope=SCOPE, session_id=chat.pk)
    assert again.archived_at is not None
    assert live.archived_at is None
    assert live.is_default is False
    assert _append(chat, ("user", "back")).messages[0].seq == 6


def test_lists_and_counts_hide_archived_sessions_unless_asked(chat):
    live = _session(title="live")
    services.archive_session(scope=SCOPE, session_id=chat.pk)

    def ids(**kwargs):
        listed = services.list_sessions(scope=SCOPE, filters=services.SessionFilters(**kwargs))
        return {session.pk for session in listed}

    assert ids() == {live.pk}
    assert ids(archived=False) == {live.pk}
    assert ids(archived=True) == {chat.pk}
    assert ids(archived=None) == {live.pk, chat.pk}
    assert services.count_sessions(scope=SCOPE) == 1
    assert services.count_sessions(scope=SCOPE, filters=services.SessionFilters(archived=True)) == 1
    assert services.count_sessions(scope=SCOPE, filters=services.SessionFilters(archived=None)) == 2
    with pytest.raises(InvalidFilter):
        services.list_sessions(scope=SCOPE, filters=services.SessionFilters(archived="any"))


def test_reference_candidates_never_offer_archived_sessions(chat):
    from cortex_sessions.references import service as references

    current = _session(title="current")
    live = _session(title="live")
    services.archive_session(scope=SCOPE, session_id=chat.pk)
    offered = {
        row["session_id"]
        for row in references.reference_candidates(scope=SCOPE, session_id=current.pk)
    }
    assert offered == {str(live.pk)}


def test_archive_of_a_foreign_id_is_not_found_and_changes_nothing():
    foreign = _session(scope=OTHER)
    with pytest.raises(SessionNotFound):
        services.archive_session(scope=SCOPE, session_id=foreign.pk)
    with pytest.raises(SessionNotFound):
        services.unarchive_session(scope=SCOPE, session_id=foreign.pk)
    assert Session.objects.get(pk=foreign.pk).archived_at is None


# -- metadata (§11.3) -----------------------------------------------------------------------------


@pytest.fixture
def tagged():
    rows = {
        "x": {"team": "x", "n": 1},
        "y": {"team": "y", "n": 1, "flag": True},
        "nested": {"team": "x", "tags": ["a", "b"], "obj": {"k": 1}},
        "null": {"team": None},
        "empty": {},
        # Keys that JSON paths would read as array indexes or path syntax.
        "numeric": {"1": "one", "-1": {"k": "minus"}, "0": [0]},
        "syntax": {"a.b": 1, "$": "root", "a b": True, "a__b": "dunder", "": "blank"},
        # The same values as other rows, as strings, or padded (MariaDB compared JSON text in a
        # case-insensitive PAD SPACE collation: 1 matched "1", "rain" matched "rain ").
        "strings": {"n": "1", "flag": "true", "team": "null", "t": "rain ", "f": "1.0"},
        "float": {"n": 1.0, "f": 1.5},
        "order": {"o": {"b": 2, "a": 1}},
    }
    return {name: _session(title=name, metadata=metadata) for name, metadata in rows.items()}


@pytest.mark.parametrize(
    ("filter_", "expected"),
    [
        (
            {},
            {"x", "y", "nested", "null", "empty", "numeric", "syntax", "strings", "float", "order"},
        ),
        ({"team": "x"}, {"x", "nested"}),
        ({"team": "x", "n": 1}, {"x"}),
        ({"n": 1}, {"x", "y", "float"}),
        ({"n": 1.0}, {"x", "y", "float"}),  # equal numbers, as in PostgreSQL's jsonb
        ({"n": "1"}, {"strings"}),
        ({"f": 1.5}, {"float"}),
        ({"f": "1.0"}, {"strings"}),
        ({"flag": True}, {"y"}),
        ({"flag": "true"}, {"strings"}),
        ({"team": None}, {"null"}),
        ({"team": "null"}, {"strings"}),
        ({"t": "rain "}, {"strings"}),
        ({"t": "rain"}, set()),
        ({"t": "RAIN "}, set()),
        # Keys differing by case are two conditions (MariaDB's optimizer once merged them).
        ({"n": 1, "N": 1}, set()),
        ({"team": "x", "TEAM": "x"}, set()),
        ({"o": {"a": 1}}, set()),
        ({"tags": ["a", "b"]}, {"nested"}),
        ({"tags": ["a"]}, set()),  # containment is not equality
        ({"obj": {"k": 1}}, {"nested"}),
        ({"obj": {}}, set()),
        ({"missing": "z"}, set()),
        ({"1": "one"}, {"numeric"}),
        ({"0": [0]}, {"numeric"}),
        ({"1": "two"}, set()),
        ({"a.b": 1}, {"syntax"}),
        ({"$": "root"}, {"syntax"}),
        ({"a b": True}, {"syntax"}),
        ({"a__b": "dunder"}, {"syntax"}),
        ({"": "blank"}, {"syntax"}),
    ],
)
def test_metadata_filter_matches_every_key_with_an_equal_value(tagged, filter_, expected):
    found = services.list_sessions(scope=SCOPE, filters=services.SessionFilters(metadata=filter_))
    assert {session.title for session in found} == expected
    assert services.count_sessions(
        scope=SCOPE, filters=services.SessionFilters(metadata=filter_)
    ) == len(expected)


def test_metadata_filter_names_a_key_each_database_can_address_or_refuses_it(tagged):
    # docs/design.md §15: a key the database's JSON paths cannot name is refused, never
    # matched wrongly. PostgreSQL names every key.
    vendor = connection.vendor
    for key, value, expected in [('q"uote', True, "syntax_pg"), ("-1", {"k": "minus"}, "numeric")]:
        _session(title=expected, metadata={key: value})
        refused = (vendor == "sqlite" and '"' in key) or (vendor == "mysql" and key[0] == "-")
        if refused:
            with pytest.raises(InvalidFilter) as caught:
                services.list_sessions(
                    scope=SCOPE, filters=services.SessionFilters(metadata={key: value})
                )
            assert caught.value.code == "invalid_filter"
        else:
            found = services.list_sessions(
                scope=SCOPE, filters=services.SessionFilters(metadata={key: value})
            )
            assert {session.title for session in found} == {expected}


def test_metadata_filter_compares_an_object_value_whatever_its_key_order(tagged):
    # docs/design.md §15.6: every database compares JSON values (SQLite in canonical form).
    found = {
        s.title
        for s in services.list_sessions(
            scope=SCOPE, filters=services.SessionFilters(metadata={"o": {"a": 1, "b": 2}})
        )
    }
    assert found == {"order"}
    found = {
        s.title
        for s in services.list_sessions(
            scope=SCOPE, filters=services.SessionFilters(metadata={"o": {"b": 2, "a": 1}})
        )
    }
    assert found == {"order"}


def test_metadata_filter_does_not_take_one_for_true(tagged):
    assert {
        s.title
        for s in services.list_sessions(
            scope=SCOPE, filters=services.SessionFilters(metadata={"n": True})
        )
    } == set()


@pytest.mark.parametrize(
    "filter_",
    [[1], "team", 3, {str(i): i for i in range(11)}, {"a": float("nan")}],
)
def test_metadata_filter_refuses_anything_but_an_object_of_at_most_ten_keys(filter_):
    with pytest.raises(InvalidFilter) as caught:
        services.list_sessions(scope=SCOPE, filters=services.SessionFilters(metadata=filter_))
    assert caught.value.code == "invalid_filter"


@pytest.mark.parametrize(
    ("filter_", "code"),
    [
        ({"a": "\x00"}, "nul_character"),
        ({"a\x00": 1}, "nul_character"),
        ({"a": [{"b": "\x00"}]}, "nul_character"),
        ({"a": "\ud800"}, "invalid_text"),
    ],
)
def test_metadata_filter_text_has_the_code_it_has_in_every_other_string(filter_, code):
    """A NUL in the metadata filter was ``invalid_filter``; everywhere else it is
    ``nul_character`` (and a lone surrogate ``invalid_text``), docs/design.md §12.4. The
    ``SessionFilters`` every list and count takes refuses it."""
    with pytest.raises(InvalidInput) as caught:
        services.SessionFilters(metadata=filter_)
    assert (caught.value.code, caught.value.field) == (code, "metadata")


def test_merge_patch_follows_rfc_7386_appendix_a():
    # (original, patch, result) from RFC 7386 Appendix A.
    cases = [
        ({"a": "b"}, {"a": "c"}, {"a": "c"}),
        ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
        ({"a": "b"}, {"a": None}, {}),
        ({"a": "b", "b": "c"}, {"a": None}, {"b": "c"}),
        ({"a": ["b"]}, {"a": "c"}, {"a": "c"}),
        ({"a": "c"}, {"a": ["b"]}, {"a": ["b"]}),
        ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
        ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
        (["a", "b"], ["c", "d"], ["c", "d"]),
        ({"a": "b"}, ["c"], ["c"]),
        ({"a": "foo"}, None, None),
        ({"a": "foo"}, "bar", "bar"),
        ({"e": None}, {"a": 1}, {"e": None, "a": 1}),
        ([1, 2], {"a": "b", "c": None}, {"a": "b"}),
        ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
    ]
    for original, patch, result in cases:
        assert merge_patch(original, patch) == result


def test_patch_session_merges_metadata_and_replaces_title_and_cwd():
    session = _session(metadata={"keep": 1, "drop": 2, "deep": {"a": 1, "b": 2}})
    patched = services.patch_session(
        scope=SCOPE,
        session_id=session.pk,
        patch={"title": "New", "cwd": None, "metadata": {"drop": None, "deep": {"b": None}}},
    )
    assert patched.title == "New"
    assert patched.cwd is None
    assert patched.metadata == {"keep": 1, "deep": {"a": 1}}
    emptied = services.patch_session(scope=SCOPE, session_id=session.pk, patch={"metadata": None})
    assert emptied.metadata == {}


@pytest.mark.parametrize(
    "patch",
    [[{"metadata": {}}], "x", {"metadata": [1]}, {"metadata": "x"}, {"message_count": 3}],
)
def test_patch_session_refuses_a_patch_that_is_not_an_object_and_writes_nothing(patch):
    session = _session(metadata={"a": 1})
    before = Session.objects.filter(pk=session.pk).values().get()
    with pytest.raises(InvalidInput):
        services.patch_session(scope=SCOPE, session_id=session.pk, patch=patch)
    assert Session.objects.filter(pk=session.pk).values().get() == before


@pytest.mark.parametrize(
    ("metadata", "code"),
    [
        ({"gone\x00": None}, "nul_character"),  # a key that would only delete
        ({"keep": {"x\x00": None}}, "nul_character"),
        ({"gone\ud800": None}, "invalid_text"),
        ({"a": _nested(MAX_JSON_DEPTH)}, "invalid_metadata"),  # deeper than MAX_JSON_DEPTH
    ],
)
def test_patch_session_checks_the_patch_itself_not_only_what_it_leaves(metadata, code):
    """A NUL in a merge-patch key whose ``null`` deletes it was accepted (nothing stored holds
    it), where every other JSON value taken in is refused for it (docs/design.md §12.4)."""
    session = _session(metadata={"keep": {"a": 1}})
    before = Session.objects.filter(pk=session.pk).values().get()
    with pytest.raises(InvalidInput) as caught:
        services.patch_session(scope=SCOPE, session_id=session.pk, patch={"metadata": metadata})
    assert (caught.value.code, caught.value.field) == (code, "metadata")
    assert Session.objects.filter(pk=session.pk).values().get() == before


def test_patch_session_of_a_foreign_id_is_not_found():
    foreign = _session(scope=OTHER, metadata={"a": 1})
    with pytest.raises(SessionNotFound):
        services.patch_session(scope=SCOPE, session_id=foreign.pk, patch={"metadata": {"b": 1}})
    assert Session.objects.get(pk=foreign.pk).metadata == {"a": 1}


# -- undo and regenerate (§11.4) ------------------------------------------------------------------


def test_pop_returns_the_newest_message_and_moves_the_counters(chat):
    popped = services.pop_message(scope=SCOPE, session_id=chat.pk)
    assert (popped.message.seq, popped.message.text) == (5, "a2")
    assert (popped.session.message_count, popped.session.last_message) == (4, "q2")
    _assert_counters_exact(chat)
    popped = services.pop_message(scope=SCOPE, session_id=chat.pk)
    assert popped.message.seq == 4
    _assert_counters_exact(chat)


def test_seq_is_never_reused_after_pop_or_delete(chat):
    services.pop_message(scope=SCOPE, session_id=chat.pk)
    services.delete_messages_after(scope=SCOPE, session_id=chat.pk, after_seq=1)
    assert _append(chat, ("user", "again")).messages[0].seq == 6


def test_pop_on_an_empty_session_is_message_not_found():
    session = _session()
    with pytest.raises(MessageNotFound):
        services.pop_message(scope=SCOPE, session_id=session.pk)


def test_delete_after_seq_removes_the_tail_with_exact_counters(chat):
    result = services.delete_messages_after(scope=SCOPE, session_id=chat.pk, after_seq=2)
    assert result.deleted == 3
    assert (result.session.message_count, result.session.last_message) == (2, "a1")
    assert [row[0] for row in _rows(chat)] == [1, 2]
    _assert_counters_exact(chat)


def test_delete_after_zero_removes_everything_and_past_the_end_nothing(chat):
    before = Session.objects.get(pk=chat.pk).updated_at
    nothing = services.delete_messages_after(scope=SCOPE, session_id=chat.pk, after_seq=99)
    assert nothing.deleted == 0
    assert Session.objects.get(pk=chat.pk).updated_at == before
    everything = services.delete_messages_after(scope=SCOPE, session_id=chat.pk)
    assert everything.deleted == 5
    assert (everything.session.message_count, everything.session.last_message) == (0, "")
    _assert_counters_exact(chat)


def test_delete_one_message_keeps_counters_exact(chat):
    session = services.delete_message(scope=SCOPE, session_id=chat.pk, seq=5)
    assert (session.message_count, session.last_message) == (4, "q2")
    _assert_counters_exact(chat)


@pytest.mark.parametrize("after_seq", [-1, "2", 2.0, None, 2**63])
def test_delete_after_refuses_a_bad_seq_and_deletes_nothing(chat, after_seq):
    with pytest.raises(InvalidFilter):
        services.delete_messages_after(scope=SCOPE, session_id=chat.pk, after_seq=after_seq)
    assert len(_rows(chat)) == 5


def test_undo_on_a_foreign_id_is_not_found_and_deletes_nothing():
    foreign = _session(scope=OTHER)
    _append(foreign, ("user", "secret"), ("assistant", "kept"))
    for undo in (
        lambda: services.pop_message(scope=SCOPE, session_id=foreign.pk),
        lambda: services.delete_messages_after(scope=SCOPE, session_id=foreign.pk),
        lambda: services.delete_message(scope=SCOPE, session_id=foreign.pk, seq=1),
    ):
        with pytest.raises(SessionNotFound):
            undo()
    assert len(_rows(foreign)) == 2
