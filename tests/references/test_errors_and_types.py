from __future__ import annotations

import threading

import pytest

from cortex_sessions.exceptions import CortexSessionsError
from cortex_sessions.references import (
    CancelToken,
    Deadline,
    InvalidReference,
    InvalidReferenceConfig,
    ReferenceBudgetExceeded,
    ReferenceCancelled,
    ReferenceReadFailed,
    ReferenceStats,
    SelfReference,
    SessionReferenceError,
    SessionReferenceInput,
    TooManyReferences,
)


@pytest.mark.parametrize(
    ("error", "code", "status"),
    [
        (InvalidReferenceConfig, "SESSION_REFERENCE_INVALID_CONFIG", 500),
        (InvalidReference, "SESSION_REFERENCE_INVALID_REFERENCE", 400),
        (SelfReference, "SESSION_REFERENCE_SELF_REFERENCE", 400),
        (TooManyReferences, "SESSION_REFERENCE_TOO_MANY", 400),
        (ReferenceReadFailed, "SESSION_REFERENCE_READ_FAILED", 404),
        (ReferenceBudgetExceeded, "SESSION_REFERENCE_BUDGET_EXCEEDED", 413),
        (ReferenceCancelled, "SESSION_REFERENCE_CANCELLED", 503),
    ],
)
def test_each_error_has_its_verbatim_code_and_http_status(error, code, status):
    raised = error()
    assert isinstance(raised, SessionReferenceError)
    assert isinstance(raised, CortexSessionsError)
    assert raised.code == code
    assert raised.http_status == status
    assert raised.message  # a default message


def test_reference_label_defaults_to_the_session_id():
    assert SessionReferenceInput("abc").effective_label == "abc"
    assert SessionReferenceInput("abc", "").effective_label == "abc"
    assert SessionReferenceInput("abc", "Plans").effective_label == "Plans"


@pytest.mark.parametrize("session_id", ["", None, 42])
def test_reference_input_without_a_string_id_is_invalid_reference(session_id):
    with pytest.raises(InvalidReference):
        SessionReferenceInput(session_id)


def test_reference_input_with_a_non_string_label_is_invalid_reference():
    with pytest.raises(InvalidReference):
        SessionReferenceInput("abc", 3)


def test_cancel_token_is_cancelled_from_another_thread():
    token = CancelToken()
    assert not token.cancelled
    thread = threading.Thread(target=token.cancel)
    thread.start()
    thread.join()
    assert token.cancelled


def test_deadline_expires_at_its_monotonic_time():
    deadline = Deadline(100.0)
    assert not deadline.expired(now=99.5)
    assert deadline.expired(now=100.0)
    assert deadline.remaining(now=99.5) == 0.5
    assert not Deadline.in_seconds(60).expired()


def test_stats_as_dict_has_the_six_documented_keys():
    stats = ReferenceStats(True, 5, 3, 2, 10, True)
    assert stats.as_dict() == {
        "compacted": True,
        "original_messages": 5,
        "retained_messages": 3,
        "omitted_messages": 2,
        "omitted_bytes": 10,
        "truncated": True,
    }
