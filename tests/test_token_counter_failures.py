"""A ``TOKEN_COUNTER`` that raises at write time (docs/design.md §16.2): every write path refuses
with :class:`~cortex_sessions.exceptions.TokenCountError` (``token_counter_failed``), chained to
the counter's exception and logged, and writes nothing."""

from __future__ import annotations

import io
import json
import logging

import pytest
from django.test import override_settings

from cortex_sessions import services, transfer
from cortex_sessions.exceptions import CortexSessionsError, InvalidInput, TokenCountError
from cortex_sessions.models import ImportedConversation, Message, Session
from cortex_sessions.tokens import count_tokens
from tests.asyncio_support import async_test

pytestmark = pytest.mark.django_db

SCOPE = "org=acme/user=1"
FAILING = {"TOKEN_COUNTER": "tests.test_token_counter_failures.tokenizer_down"}


class TokenizerDown(RuntimeError):
    pass


def tokenizer_down(role, content):
    """A host's counter whose tokenizer service is unreachable."""
    raise TokenizerDown("tokenizer service unreachable")


def _session():
    session = services.create_session(scope=SCOPE, agent_id="a")
    services.append_messages(
        scope=SCOPE,
        session_id=session.pk,
        messages=[{"role": "user", "content": "one"}, {"role": "assistant", "content": "two"}],
    )
    session.refresh_from_db()
    return session


def _state():
    return (
        list(Session.objects.order_by("pk").values()),
        list(Message.objects.order_by("pk").values()),
    )


def test_count_tokens_chains_and_logs_the_counters_error(caplog):
    with (
        override_settings(CORTEX_SESSIONS=FAILING),
        caplog.at_level(logging.ERROR),
        pytest.raises(TokenCountError) as refused,
    ):
        count_tokens("user", [{"type": "text", "text": "x"}])
    error = refused.value
    assert error.code == "token_counter_failed"
    assert isinstance(error.__cause__, TokenizerDown)
    assert not isinstance(error, InvalidInput)  # a server fault, not bad input
    assert error.params == {"role": "user", "error": "TokenizerDown"}
    assert error.retry_after == 1
    (record,) = [r for r in caplog.records if r.name == "cortex_sessions"]
    assert record.exc_info and record.exc_info[0] is TokenizerDown


def test_append_and_keyed_append_write_nothing():
    session = _session()
    before = _state()
    with override_settings(CORTEX_SESSIONS=FAILING):
        for key in (None, "k1"):
            with pytest.raises(TokenCountError):
                services.append_messages(
                    scope=SCOPE,
                    session_id=session.pk,
                    messages=[{"role": "user", "content": "three"}],
                    idempotency_key=key,
                )
    assert _state() == before
    # The key was not spent: with a working counter the same call writes once.
    result = services.append_messages(
        scope=SCOPE,
        session_id=session.pk,
        messages=[{"role": "user", "content": "three"}],
        idempotency_key="k1",
    )
    assert result.messages[0].seq == 3


@async_test
async def test_the_async_append_raises_it_too():
    session = await services.acreate_session(scope=SCOPE, agent_id="a")
    with override_settings(CORTEX_SESSIONS=FAILING), pytest.raises(TokenCountError):
        await services.aappend_messages(
            scope=SCOPE, session_id=session.pk, messages=[{"role": "user", "content": "x"}]
        )
    assert not await Message.objects.filter(session_id=session.pk).aexists()


def test_compaction_writes_nothing():
    session = _session()
    before = _state()
    with override_settings(CORTEX_SESSIONS=FAILING), pytest.raises(TokenCountError):
        services.compact_session(scope=SCOPE, session_id=session.pk, through_seq=1, summary="s")
    assert _state() == before


def test_an_import_refuses_the_conversation_whole_and_reports_the_code():
    lines = [
        json.dumps({"id": "c1", "messages": [{"role": "user", "content": "a"}]}),
        json.dumps({"id": "c2", "messages": []}),  # counts nothing: imported
    ]
    with override_settings(CORTEX_SESSIONS=FAILING):
        report = transfer.import_conversations(
            io.StringIO("\n".join(lines) + "\n"), scope=SCOPE, agent_id="a"
        )
    assert (report.imported, report.failed) == (1, 1)
    (error,) = report.errors
    assert (error.line, error.code, error.external_id) == (1, "token_counter_failed", "c1")
    assert list(ImportedConversation.objects.values_list("external_id", flat=True)) == ["c2"]
    assert not Message.objects.exists()
    assert Session.objects.count() == 1


def test_it_is_an_app_error_with_a_stable_code():
    assert issubclass(TokenCountError, CortexSessionsError)
    assert TokenCountError().code == "token_counter_failed"
