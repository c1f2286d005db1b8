"""Grapheme boundaries shared by previews and reference retention (docs/design.md §5, §8.6)."""

from __future__ import annotations

import unicodedata

import pytest
import regex
from hypothesis import given, settings
from hypothesis import strategies as st

from cortex_sessions.content import is_grapheme_boundary, preview

# Pieces that stress every rule of UAX #29: combining marks, Hangul jamo, emoji ZWJ sequences,
# skin tones, flags, keycaps, Indic conjuncts, prepended marks, CR LF, plain text.
PIECES = [
    "a",
    "e\u0301",
    "\u1112\u1161\u11ab",
    "한",
    "\u0e01\u0e33",
    "\u0600",
    "1",
    "\u0915\u094d\u0937",
    "👩\u200d👩\u200d👧",
    "👍🏽",
    "🇳",
    "🇴",
    "#\ufe0f\u20e3",
    "\r",
    "\n",
    "\u200d",
    "\u0301" * 40,
    " ",
]
texts = st.lists(st.sampled_from(PIECES), max_size=30).map("".join)


@given(texts)
@settings(max_examples=300)
def test_boundaries_agree_with_a_full_segmentation(text):
    starts = {match.start() for match in regex.finditer(r"\X", text)} | {len(text)}
    assert {i for i in range(len(text) + 1) if is_grapheme_boundary(text, i)} == starts


@given(texts, st.integers(min_value=0, max_value=40))
@settings(max_examples=300)
def test_a_preview_ends_on_a_whole_character(text, max_chars):
    cut = preview(text, max_chars)
    kept = cut.removesuffix("…") if len(text) > max_chars else cut
    assert text.startswith(kept)
    assert is_grapheme_boundary(text, len(kept))
    assert len(kept) <= max_chars


def test_a_decomposed_korean_preview_keeps_whole_syllables():
    text = unicodedata.normalize("NFD", "한국어 텍스트")
    assert preview(text, 4) == unicodedata.normalize("NFD", "한") + "…"


def _lets_another_thread_run(call) -> bool:
    """Whether another Python thread runs while ``call(helper_ran)`` is under way — which it can
    only if ``call`` releases the interpreter lock, however loaded the machine is.

    A helper thread, blocked until just before ``call`` starts, records the first time it runs
    whether ``call`` is still under way (then sets ``helper_ran``, a ``threading.Event``). The
    switch interval is set far beyond any call before the helper exists, so the interpreter
    never forces a switch to it: it runs during ``call`` only if ``call`` lets go of the lock,
    and the verdict does not depend on when the OS schedules either thread.
    """
    import sys
    import threading

    woken, helper_ran = threading.Event(), threading.Event()
    state = {"in_call": False, "saw_call": None}

    def helper() -> None:
        woken.wait()
        state["saw_call"] = state["in_call"]
        helper_ran.set()

    interval = sys.getswitchinterval()
    sys.setswitchinterval(10_000.0)  # seconds: no forced switch while call() runs
    thread = threading.Thread(target=helper)
    try:
        thread.start()  # returns once the helper runs; it then blocks in woken.wait()
        state["in_call"] = True
        woken.set()  # the helper now waits for the interpreter lock
        try:
            call(helper_ran)
        finally:
            state["in_call"] = False
    finally:
        sys.setswitchinterval(interval)
        thread.join()  # this thread blocks: the helper runs and records
    assert helper_ran.is_set()
    return bool(state["saw_call"])


def test_checking_text_keeps_the_interpreter_lock():
    # Each message an append takes is checked for NUL and lone surrogates. Releasing the
    # interpreter lock for the match (what the ``regex`` library does by default on a ``str``)
    # makes every writer thread wait to get it back after each message (docs/performance.md);
    # the check must not: no other thread may run while it checks.
    from cortex_sessions.content import check_json_value

    # Not ASCII: ASCII text skips the regular expression (no surrogate can be in it, and a NUL
    # is found with memchr), so the match this probes runs only on text like this.
    text = "An ordinary message, señor. " * 150_000  # 4 MB

    assert not _lets_another_thread_run(lambda _: check_json_value(text, field="content"))
    assert not _lets_another_thread_run(lambda _: check_json_value([{"a": text}], field="content"))
    # Controls: the probe sees a call that lets go of the lock (by waiting for the helper), and
    # does not see pure Python work that keeps it.
    assert _lets_another_thread_run(lambda helper_ran: helper_ran.wait(60))
    assert not _lets_another_thread_run(lambda _: sum(range(200_000)))


@given(
    st.text(st.sampled_from("ab\x00\ud800\udfffé€")),
    st.sampled_from(["value", "key", "item"]),
    st.booleans(),
)
@settings(max_examples=500)
def test_text_is_refused_exactly_where_nul_or_a_surrogate_is(text, where, allow_nul):
    # ASCII strings skip the regular expression (check_json_value's fast path): the verdict
    # and the error (the first unstorable character's) must be the expression's own, for a
    # string, an object key and a list item alike.
    from cortex_sessions.content import check_json_value
    from cortex_sessions.exceptions import InvalidText, NulCharacter

    value = {"value": text, "key": {text: 1}, "item": [1, text]}[where]
    found = regex.search(r"[\ud800-\udfff]" if allow_nul else r"[\x00\ud800-\udfff]", text)
    expected = None if found is None else NulCharacter if found.group() == "\x00" else InvalidText
    try:
        check_json_value(value, field="content", allow_nul=allow_nul)
    except (NulCharacter, InvalidText) as error:
        assert type(error) is expected
    else:
        assert expected is None


def test_a_str_subclass_cannot_talk_its_way_past_the_check():
    # The fast path for ASCII text trusts str's own isascii and ``in``; a subclass (host code
    # can pass one to the services) overriding them is read by the regular expression.
    from cortex_sessions.content import check_json_value
    from cortex_sessions.exceptions import InvalidText, NulCharacter

    class Sly(str):
        def isascii(self) -> bool:
            return True

        def __contains__(self, item: object) -> bool:
            return False

    for value in (Sly("us\x00er"), {Sly("k\x00"): 1}, [1, Sly("a\x00")]):
        with pytest.raises(NulCharacter):
            check_json_value(value, field="content")
    with pytest.raises(InvalidText):
        check_json_value(Sly("\ud800"), field="content", allow_nul=True)


def test_object_keys_are_strings_with_distinct_texts():
    """``json.dumps`` writes a key as its text: a key that is not a ``str`` (``1`` → ``"1"``),
    or two ``str`` subclass keys with one text, would make two keys one in storage."""
    import enum

    from cortex_sessions.content import check_json_value
    from cortex_sessions.exceptions import InvalidContent, InvalidInput, InvalidMetadata

    class Same(str):  # equal texts, unequal keys
        __hash__ = object.__hash__

        def __eq__(self, other: object) -> bool:
            return self is other

    class Colour(enum.StrEnum):
        RED = "red"

    for key in (1, True, None, 1.5, ("a",), b"a", frozenset()):
        with pytest.raises(InvalidMetadata, match="not a string"):
            check_json_value({"a": [{key: 1}]}, field="metadata")
        with pytest.raises(InvalidContent, match="not a string"):
            check_json_value([{key: 1}], field="content")
        with pytest.raises(InvalidInput, match="not a string"):
            check_json_value({key: 1}, field="state")
    with pytest.raises(InvalidMetadata, match="same text"):
        check_json_value({Same("a"): 1, Same("a"): 2}, field="metadata")
    with pytest.raises(InvalidMetadata, match="same text"):
        check_json_value({"red": 1, Same("red"): 2}, field="metadata")
    # A subclass key whose text no other key has is a string key like any other.
    check_json_value({Colour.RED: 1, Same("b"): 2, "c": {Same("c"): 3}}, field="metadata")
