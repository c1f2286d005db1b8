"""Grapheme boundaries shared by previews and reference retention (docs/design.md §5, §8.6)."""

from __future__ import annotations

import unicodedata

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
