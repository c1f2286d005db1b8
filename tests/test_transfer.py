"""Import and export of conversations as JSON Lines (``cortex_sessions.transfer``)."""

from __future__ import annotations

import io
import json
import sys
import threading
from datetime import UTC, datetime

import pytest
from django.core.management import CommandError, ManagementUtility, call_command
from django.db import connection, connections

from cortex_sessions import services, transfer
from cortex_sessions.models import ImportedConversation, Message, Session

pytestmark = pytest.mark.django_db

ACME = "org=acme"
ALICE = "org=acme/user=alice"
BOB = "org=acme/user=bob"
ELSEWHERE = "org=globex/user=carol"
AGENT = "chitchat"

# Emoji with skin tones, ZWJ families, flags and variation selectors, astral CJK, RTL text.
EMOJI = "Hi 👋🏽 👩‍👩‍👧‍👦 🇳🇴 ❤️ 𠜎 مرحبا"


def line(**conversation) -> str:
    return json.dumps(conversation, ensure_ascii=False)


def conversation(external_id, *texts, **fields):
    roles = ["user", "assistant"]
    return line(
        id=external_id,
        messages=[{"role": roles[i % 2], "content": text} for i, text in enumerate(texts)],
        **fields,
    )


def import_lines(lines, scope=ALICE, agent_id=AGENT, **kwargs):
    return transfer.import_conversations(lines, scope=scope, agent_id=agent_id, **kwargs)


def export_text(scope=ALICE, **kwargs) -> str:
    return "".join(transfer.export_conversations(scope=scope, **kwargs))


def run_import(path, *args, **options):
    out, err = io.StringIO(), io.StringIO()
    error = None
    try:
        call_command("cortex_sessions_import", str(path), *args, stdout=out, stderr=err, **options)
    except CommandError as exc:
        error = exc
    return out.getvalue(), err.getvalue(), error


def run_export(*args, **options) -> str:
    out = io.StringIO()
    call_command("cortex_sessions_export", *args, stdout=out, **options)
    return out.getvalue()


def message_rows(scope):
    return list(
        Message.objects.filter(scope__startswith=scope)
        .order_by("session__title", "seq")
        .values_list("seq", "role", "source", "content", "metadata", "created_at")
    )


def build_rich_sessions(scope=ALICE):
    """Sessions exercising every exported field, written through the services."""
    first = services.create_session(
        scope=scope, agent_id=AGENT, title="Trip to Oslo", metadata={"tags": ["x"], "n": 1}
    )
    services.append_messages(
        scope=scope,
        session_id=first.pk,
        messages=[
            services.MessageInput(
                role="system",
                content="Be brief.",
                created_at=datetime(2020, 1, 2, 3, 4, 5, 678901, tzinfo=UTC),
            ),
            {"role": "user", "content": "Where to eat?", "metadata": {"client": "web"}},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Try Maaemo."},
                    {"type": "tool_use", "id": "t1", "name": "maps", "input": {"q": "Maaemo"}},
                ],
            },
            {"role": "tool", "content": [{"type": "tool_result", "tool_use_id": "t1"}]},
            {"role": "user", "source": "checkpoint", "content": "Summary so far."},
            {"role": "user", "source": "host", "content": "Injected by the host."},
        ],
    )
    second = services.create_session(scope=scope, agent_id=AGENT, cwd="/srv/repo", title="")
    services.append_messages(
        scope=scope, session_id=second.pk, messages=[{"role": "user", "content": EMOJI}]
    )
    services.create_session(scope=scope, agent_id=AGENT, title="Empty")
    services.create_session(scope=scope, agent_id="other-agent", title="Other agent")
    return first, second


# -- round trip -----------------------------------------------------------------------------------


def test_export_then_import_into_another_scope_reproduces_sessions_and_messages_exactly():
    build_rich_sessions(ALICE)
    exported = export_text(ALICE, agent_id=AGENT)

    report = import_lines(io.StringIO(exported), scope=ELSEWHERE)

    assert (report.imported, report.skipped, report.failed) == (3, 0, 0)
    assert export_text(ELSEWHERE, agent_id=AGENT) == exported
    originals = Session.objects.filter(scope=ALICE, agent_id=AGENT).order_by("title")
    copies = Session.objects.filter(scope=ELSEWHERE).order_by("title")
    fields = ("title", "metadata", "cwd", "message_count", "last_message", "last_seq")
    assert [[getattr(s, f) for f in fields] for s in copies] == [
        [getattr(s, f) for f in fields] for s in originals
    ]
    assert message_rows(ELSEWHERE) == message_rows(ALICE)


def test_export_then_import_into_an_empty_database_reproduces_the_export():
    build_rich_sessions(ALICE)
    exported = export_text(ACME)
    rows = message_rows(ALICE)
    Session.objects.all().delete()

    report = import_lines(io.StringIO(exported), scope=ALICE, agent_id=AGENT)

    assert report.imported == 4 and report.failed == 0
    assert export_text(ACME) == exported.replace('"other-agent"', f'"{AGENT}"')
    assert message_rows(ALICE) == rows
    assert services.recount_sessions(scope=ACME, repair=False) == []


def test_export_command_writes_what_the_import_command_reads(tmp_path):
    build_rich_sessions(ALICE)
    path = tmp_path / "sessions.jsonl"
    path.write_text(run_export("--scope", ALICE, "--agent-id", AGENT), encoding="utf-8")

    out, err, error = run_import(path, "--agent-id", AGENT, "--scope", BOB)

    assert error is None and err == ""
    assert "3 imported (7 messages), 0 skipped" in out
    assert run_export("--scope", BOB) == path.read_text(encoding="utf-8")


def test_export_to_an_output_file_is_utf8(tmp_path):
    build_rich_sessions(ALICE)
    path = tmp_path / "out.jsonl"
    run_export("--scope", ALICE, "--output", str(path))
    assert EMOJI in path.read_text(encoding="utf-8")
    assert path.read_text(encoding="utf-8") == export_text(ALICE)


def test_export_escapes_non_ascii_for_an_output_that_cannot_take_utf8():
    build_rich_sessions(ALICE)
    out = io.TextIOWrapper(io.BytesIO(), encoding="ascii")
    call_command("cortex_sessions_export", "--scope", ALICE, stdout=out)
    out.seek(0)
    text = out.read()
    assert text.isascii()
    assert [json.loads(x) for x in text.splitlines()] == [
        json.loads(x) for x in export_text(ALICE).splitlines()
    ]


def test_export_filters_by_agent_and_exact_scope():
    services.create_session(scope=ACME, agent_id=AGENT, title="org level")
    services.create_session(scope=ALICE, agent_id=AGENT, title="alice")
    services.create_session(scope=ALICE, agent_id="other", title="other agent")
    services.create_session(scope="org=acme2", agent_id=AGENT, title="sibling org")

    def titles(*args):
        return [json.loads(x)["title"] for x in run_export("--scope", *args).splitlines()]

    assert sorted(titles(ACME)) == ["alice", "org level", "other agent"]
    assert titles(ACME, "--exact") == ["org level"]
    assert sorted(titles(ACME, "--agent-id", AGENT)) == ["alice", "org level"]


def test_export_warns_when_it_mixes_agents_or_scopes():
    services.create_session(scope=ACME, agent_id=AGENT, title="org level")
    services.create_session(scope=ALICE, agent_id=AGENT, title="alice")
    services.create_session(scope=ALICE, agent_id="other", title="other agent")

    def warning(*args):
        err = io.StringIO()
        call_command("cortex_sessions_export", "--scope", *args, stdout=io.StringIO(), stderr=err)
        return err.getvalue()

    assert "belong to 2 agents and 2 scopes." in warning(ACME)
    assert "belong to 1 agent and 2 scopes." in warning(ACME, "--agent-id", AGENT)
    assert "belong to 2 agents and 1 scope." in warning(ALICE, "--exact")
    assert warning(ALICE, "--agent-id", AGENT) == ""
    assert warning(ACME, "--exact") == ""


def test_export_reads_in_chunks_and_gives_the_same_file():
    for n in range(5):
        session = services.create_session(scope=ALICE, agent_id=AGENT, title=f"s{n}")
        if n:
            services.append_messages(
                scope=ALICE,
                session_id=session.pk,
                messages=[{"role": "user", "content": f"m{k}"} for k in range(n * 2)],
            )
    services.delete_message(scope=ALICE, session_id=session.pk, seq=3)  # a gap in seq

    chunked = export_text(ALICE, chunk_size=2, message_chunk_size=3)

    assert chunked == export_text(ALICE)
    assert [len(json.loads(x)["messages"]) for x in chunked.splitlines()] == [0, 2, 4, 6, 7]


def test_export_of_a_long_session_makes_one_query_per_chunk(django_assert_num_queries):
    session = services.create_session(scope=ALICE, agent_id=AGENT)
    services.append_messages(
        scope=ALICE,
        session_id=session.pk,
        messages=[{"role": "user", "content": str(k)} for k in range(25)],
    )
    # 1 page of sessions + 3 pages of 10 messages (the last short).
    with django_assert_num_queries(4):
        export_text(ALICE, message_chunk_size=10)


# -- re-import ------------------------------------------------------------------------------------


def test_reimporting_the_same_file_skips_conversations_already_imported(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text(
        "\n".join(
            [conversation("c1", "Hi", "Hello"), conversation(2, "Yo"), conversation(None, "anon")]
        )
        + "\n",
        encoding="utf-8",
    )
    out, _, error = run_import(path, "--agent-id", AGENT, "--scope", ALICE)
    assert error is None and "3 imported" in out

    out, _, error = run_import(path, "--agent-id", AGENT, "--scope", ALICE)

    assert error is None
    assert "1 imported (1 messages), 2 skipped as already imported, 0 failed" in out
    assert Session.objects.filter(title="").count() == 4  # the conversation without an id twice
    assert set(ImportedConversation.objects.values_list("external_id", flat=True)) == {"c1", "2"}


def test_the_same_conversation_is_imported_again_for_another_agent_or_scope():
    lines = [conversation("c1", "Hi")]
    assert import_lines(lines).imported == 1
    assert import_lines(lines, agent_id="other").imported == 1
    assert import_lines(lines, scope=BOB).imported == 1
    assert import_lines(lines, scope=ACME).imported == 1  # exact scope, not beneath
    assert import_lines(lines).skipped == 1


def test_importing_an_export_back_into_its_own_scope_adds_nothing():
    build_rich_sessions(ALICE)
    exported = export_text(ALICE, agent_id=AGENT)

    report = import_lines(io.StringIO(exported))

    assert (report.imported, report.skipped) == (0, 3)
    assert Session.objects.count() == 4


def test_a_deleted_session_can_be_imported_again():
    import_lines([conversation("c1", "Hi")])
    session = Session.objects.get()
    services.delete_session(scope=ALICE, session_id=session.pk)

    assert import_lines([conversation("c1", "Hi")]).imported == 1
    assert ImportedConversation.objects.get().session_id != session.pk


# -- bad lines ------------------------------------------------------------------------------------


def test_a_partial_import_from_manage_py_prints_its_summary_and_exits_1_without_commanderror(
    tmp_path, capsys, monkeypatch
):
    # manage.py closes every connection when the command ends; keep the test's open.
    monkeypatch.setattr(connections, "close_all", lambda: None)
    path = tmp_path / "c.jsonl"
    path.write_text(conversation("c1", "one") + "\n{not json}\n", encoding="utf-8")
    argv = ["manage.py", "cortex_sessions_import", str(path), "--agent-id", AGENT]

    with pytest.raises(SystemExit) as exited:
        ManagementUtility([*argv, "--scope", ALICE]).execute()

    assert exited.value.code == 1
    err = capsys.readouterr().err
    assert err.startswith("line 2: The line is not valid JSON")
    assert err.endswith(
        "2 line(s): 1 imported (1 messages), 0 skipped as already imported, 1 failed. The failed "
        "line(s) are listed above; the other lines were imported.\n"
    )
    assert "CommandError" not in err
    assert Session.objects.count() == 1


def test_a_bad_line_in_the_middle_is_reported_and_the_good_lines_around_it_are_imported(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text(
        "\n".join(
            [
                conversation("c1", "one"),
                conversation("c2", "two", "deux"),
                '{"id": "c3", "messages": [{"role": "user", "content": "unterminated"',
                conversation("c4", "four"),
                conversation("c5", "five", "cinq", "fem"),
            ]
        ),
        encoding="utf-8",
    )

    _, err, error = run_import(path, "--agent-id", AGENT, "--scope", ALICE)

    assert isinstance(error, CommandError)
    assert "4 imported (7 messages), 0 skipped as already imported, 1 failed" in str(error)
    assert err.startswith("line 3: The line is not valid JSON")
    assert sorted(Session.objects.values_list("import_record__external_id", flat=True)) == [
        "c1",
        "c2",
        "c4",
        "c5",
    ]
    assert services.recount_sessions(scope=ALICE, repair=False) == []


def test_a_conversation_refused_by_the_services_halfway_leaves_nothing_behind(monkeypatch):
    monkeypatch.setattr(transfer, "APPEND_BATCH", 2)
    messages = [{"role": "user", "content": f"m{k}"} for k in range(5)]
    messages[3]["metadata"] = ["not", "an", "object"]  # refused by append_messages, batch 2
    lines = [
        conversation("ok-1", "a"),
        line(id="bad", title="half", messages=messages),
        conversation("ok-2", "b"),
    ]
    errors = []

    report = import_lines(lines, on_error=errors.append)

    assert (report.imported, report.failed) == (2, 1)
    assert [(e.line, e.code, e.external_id) for e in errors] == [(2, "invalid_metadata", "bad")]
    assert not Session.objects.filter(title="half").exists()
    assert Message.objects.count() == 2
    assert not ImportedConversation.objects.filter(external_id="bad").exists()
    # Fixed, the conversation imports on the next run; the others are skipped.
    messages[3]["metadata"] = {}
    lines[1] = line(id="bad", title="half", messages=messages)
    report = import_lines(lines)
    assert (report.imported, report.skipped) == (1, 2)
    assert Session.objects.get(title="half").message_count == 5


@pytest.mark.parametrize(
    ("raw", "code", "reason"),
    [
        ("[1, 2]", "invalid_conversation", "must be a JSON object, not list"),
        ('{"id": "x"}', "invalid_conversation", "messages must be a list"),
        ('{"messages": {}}', "invalid_conversation", "messages must be a list"),
        ('{"messages": [], "titel": "typo"}', "invalid_conversation", "Unknown keys: titel"),
        ('{"messages": ["hi"]}', "invalid_conversation", "messages[0] must be an object"),
        (
            '{"messages": [{"role": "user", "content": "x", "when": 1}]}',
            "invalid_conversation",
            "messages[0] has unknown keys: when",
        ),
        ('{"messages": [{"content": "x"}]}', "invalid_conversation", "messages[0].role"),
        (
            '{"messages": [{"role": "user", "content": "x", "source": "robot"}]}',
            "invalid_conversation",
            "messages[0].source",
        ),
        (
            '{"messages": [{"role": "user", "content": "x", "created_at": "yesterday"}]}',
            "invalid_conversation",
            "messages[0].created_at must be an ISO 8601 timestamp",
        ),
        (
            '{"messages": [{"role": "user", "content": "x", "created_at": "2020-02-30T00:00"}]}',
            "invalid_conversation",
            "created_at",
        ),
        ('{"messages": [{"role": "user", "content": 5}]}', "invalid_content", "messages[0]"),
        ('{"messages": [{"role": "user", "content": ""}]}', "empty_content", "messages[0]"),
        ('{"messages": [{"role": "user", "content": "a\\u0000"}]}', "nul_character", ""),
        ('{"messages": [{"role": "user", "content": "a\\ud800b"}]}', "invalid_text", ""),
        ('{"title": "\\udc00", "messages": []}', "invalid_text", ""),
        ('{"metadata": {"\\ud800": 1}, "messages": []}', "invalid_text", ""),
        ('{"id": "x\\ud800", "messages": []}', "invalid_conversation", "lone surrogates"),
        ('{"id": true, "messages": []}', "invalid_conversation", "id must be"),
        ('{"id": "", "messages": []}', "invalid_conversation", "id must be"),
        ('{"id": "a\\nb", "messages": []}', "invalid_conversation", "control characters"),
        ('{"id": "' + "é" * 128 + '", "messages": []}', "invalid_conversation", "UTF-8 bytes"),
        ('{"title": "' + "x" * 501 + '", "messages": []}', "too_long", "title"),
        ('{"title": 5, "messages": []}', "invalid", "title must be a string"),
        ('{"metadata": [], "messages": []}', "invalid_metadata", "metadata"),
        ('{"cwd": 1, "messages": []}', "invalid", "cwd"),
        (b'{"title": "\xff", "messages": []}', "invalid_conversation", "not UTF-8"),
        ("{'single': 'quotes'}", "invalid_conversation", "not valid JSON"),
    ],
)
def test_each_kind_of_bad_line_is_reported_with_its_number_code_and_reason(raw, code, reason):
    good = conversation("good", "fine")
    lines = [good.encode(), raw if isinstance(raw, bytes) else raw.encode(), b"\n"]

    report = import_lines(lines)

    assert (report.lines, report.imported, report.failed) == (2, 1, 1)
    [error] = report.errors
    assert (error.line, error.code) == (2, code)
    assert reason in error.reason
    assert Session.objects.count() == 1


def test_an_oversized_message_fails_its_line_only(settings):
    settings.CORTEX_SESSIONS = {"MAX_MESSAGE_BYTES": 1000}
    report = import_lines([conversation("big", "x" * 2000), conversation("small", "x")])
    assert (report.imported, report.failed) == (1, 1)
    assert report.errors[0].code == "message_too_large"


def test_blank_lines_and_a_byte_order_mark_are_ignored():
    lines = ["\ufeff" + conversation("a", "one") + "\n", "\n", "   \n", conversation("b", "two")]
    report = import_lines(lines)
    assert (report.lines, report.imported, report.failed) == (2, 2, 0)


# -- content --------------------------------------------------------------------------------------


def test_a_conversation_with_emoji_and_very_long_messages_round_trips():
    long_text = ("Ünïcödé ✓ 👩‍💻 " * 40_000)[:400_000]  # ~ 700 KB of UTF-8, under 1 MiB
    lines = [
        line(
            id="emoji-😀",
            title=EMOJI,
            metadata={"note": "🙂", "nested": {"flag": "🇯🇵"}},
            cwd="/home/ü/🚀",
            messages=[
                {"role": "user", "content": EMOJI},
                {"role": "assistant", "content": long_text},
                {"role": "user", "content": [{"type": "text", "text": long_text + "🏁"}]},
            ],
        )
    ]

    report = import_lines(lines)

    assert report.imported == 1
    session = Session.objects.get()
    assert session.title == EMOJI and session.message_count == 3
    assert session.last_message.endswith("…") and len(session.last_message) <= 281
    texts = [m.text for m in Message.objects.filter(session=session).order_by("seq")]
    assert texts == [EMOJI, long_text, long_text + "🏁"]
    exported = export_text(ALICE)
    assert json.loads(exported)["id"] == "emoji-😀"
    Session.objects.all().delete()
    assert import_lines(io.StringIO(exported)).imported == 1
    assert export_text(ALICE) == exported


def test_created_at_is_kept_and_a_naive_timestamp_is_read_as_utc():
    messages = [
        {"role": "user", "content": "a", "created_at": "2018-05-02T19:38:15Z"},
        {"role": "user", "content": "b", "created_at": "2018-05-02T21:38:15.25+02:00"},
        {"role": "user", "content": "c", "created_at": "2018-05-02T19:38:15"},
    ]
    import_lines([line(messages=messages)])
    stamps = list(Message.objects.order_by("seq").values_list("created_at", flat=True))
    expected = datetime(2018, 5, 2, 19, 38, 15, tzinfo=UTC)
    assert stamps == [expected, expected.replace(microsecond=250000), expected]


def test_string_content_becomes_one_text_block_and_sources_default_like_the_services():
    import_lines([conversation("c", "Hi", "Hello")])
    rows = list(Message.objects.order_by("seq").values_list("role", "source", "content"))
    assert rows == [
        ("user", "user", [{"type": "text", "text": "Hi"}]),
        ("assistant", "host", [{"type": "text", "text": "Hello"}]),
    ]


# -- the command ----------------------------------------------------------------------------------


def test_import_reads_stdin_when_the_file_is_a_dash(monkeypatch):
    data = (conversation("a", "from stdin 😀") + "\n").encode("utf-8")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data), encoding="latin-1"))

    out, _, error = run_import("-", "--agent-id", AGENT, "--scope", ALICE)

    assert error is None and "1 imported" in out
    assert Message.objects.get().text == "from stdin 😀"


def test_import_prints_progress_on_long_runs(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text("\n".join(conversation(f"c{n}", "x") for n in range(7)), encoding="utf-8")

    _, err, error = run_import(path, "--agent-id", AGENT, "--scope", ALICE, progress_every=3)

    assert error is None
    assert err.splitlines() == [
        "... 3 line(s): 3 imported (3 messages), 0 skipped as already imported, 0 failed",
        "... 6 line(s): 6 imported (6 messages), 0 skipped as already imported, 0 failed",
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--agent-id", AGENT, "--scope", ""], "no_scope"),
        (["--agent-id", AGENT, "--scope", "org"], "invalid_scope"),
        (["--agent-id", AGENT, "--scope", "Org=acme"], "invalid_scope"),
        (["--agent-id", AGENT, "--scope", "/".join(f"l{n}=x" for n in range(4))], "invalid_scope"),
        (["--agent-id", "", "--scope", ALICE], "invalid_agent_id"),
        (["--agent-id", "a\tb", "--scope", ALICE], "invalid_agent_id"),
        (["--agent-id", "x" * 256, "--scope", ALICE], "invalid_agent_id"),
        # an argument that is not UTF-8 arrives with lone surrogates (surrogateescape)
        (
            ["--agent-id", b"bot\xff".decode("utf-8", "surrogateescape"), "--scope", ALICE],
            "invalid_text",
        ),
        (["--agent-id", "a\x00b", "--scope", ALICE], "nul_character"),
    ],
)
def test_bad_scope_or_agent_is_a_command_error_before_anything_is_read(tmp_path, args, message):
    path = tmp_path / "c.jsonl"
    path.write_text(conversation("a", "x"), encoding="utf-8")
    with pytest.raises(CommandError, match=message):
        call_command("cortex_sessions_import", str(path), *args)
    with pytest.raises(CommandError, match=message):
        call_command("cortex_sessions_export", *args)
    assert Session.objects.count() == 0


def test_a_missing_file_is_a_command_error(tmp_path):
    with pytest.raises(CommandError, match="Cannot read"):
        call_command("cortex_sessions_import", str(tmp_path / "nope"), agent_id=AGENT, scope=ALICE)


@pytest.mark.parametrize("args", [["--scope", ALICE], ["--agent-id", AGENT]])
def test_scope_and_agent_are_required_by_import(tmp_path, args):
    with pytest.raises(CommandError, match="required"):
        call_command("cortex_sessions_import", str(tmp_path / "c.jsonl"), *args)


# -- concurrency (PostgreSQL, MySQL/MariaDB) -------------------------------------------------------


@pytest.mark.concurrent_db
@pytest.mark.django_db(transaction=True)
def test_concurrent_imports_of_the_same_file_import_each_conversation_once():
    lines = [conversation(f"c{n}", "hello", "world") for n in range(20)]
    barrier = threading.Barrier(4)
    reports = []

    def work():
        try:
            barrier.wait()
            reports.append(import_lines(lines))
        finally:
            connection.close()

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sum(r.imported for r in reports) == 20
    assert sum(r.skipped for r in reports) == 60
    assert all(r.failed == 0 for r in reports)
    assert Session.objects.count() == 20
    assert Message.objects.count() == 40
