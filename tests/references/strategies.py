"""Hypothesis strategies shared by the reference tests."""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st

from cortex_sessions.references import SourceMessage, build_snapshot, tag_safe_json, utf8_len

PROPERTY = settings(max_examples=200, deadline=None)

#: Characters whose JSON cost differs from their UTF-8 length, and multi-code-point clusters.
TRICKY_PIECES = [
    "<",
    '"',
    "\\",
    "\n",
    "\r\n",
    "\x01",
    "\x7f",
    "é",
    "e\u0301",  # e + combining acute
    "a\u0301\u0323",  # two combining marks
    "\u0915\u093f",  # Devanagari KA + vowel sign I (a spacing mark)
    "中文",
    "😀",
    "👍🏽",  # skin-tone modifier
    "👩\u200d💻",  # ZWJ sequence
    "👨\u200d👩\u200d👧\u200d👦",
    "🇫🇷",  # regional-indicator pair
    "❤\ufe0f",  # variation selector
    "🏴\U000e0067\U000e0062\U000e0073\U000e0063\U000e0074\U000e007f",  # tag sequence
    "\u2028",
]

_piece = st.one_of(st.sampled_from(TRICKY_PIECES), st.text(max_size=8))
tricky_text = st.one_of(
    st.lists(_piece, max_size=40).map("".join),
    st.tuples(st.lists(_piece, min_size=1, max_size=5), st.integers(1, 60)).map(
        lambda pair: "".join(pair[0]) * pair[1]  # long, repetitive texts worth shortening
    ),
)

#: Text without "[" so an omission marker can be found unambiguously.
marker_free_text = tricky_text.map(lambda text: text.replace("[", "("))


def text_message(seq: int, role: str, source: str, text: str) -> SourceMessage:
    return SourceMessage(seq, role, source, [{"type": "text", "text": text}])


@st.composite
def sessions(draw, text=marker_free_text, max_messages=25):
    """A list of stored messages with seqs 1..n of every role and source."""
    kinds = st.sampled_from(
        [
            ("user", "user"),
            ("assistant", "assistant"),
            ("user", "checkpoint"),
            ("tool", "user"),
            ("system", "user"),
            ("user", "host"),
            ("user", "session-reference"),
            ("assistant", "assistant-tool-only"),
        ]
    )
    count = draw(st.integers(0, max_messages))
    messages = []
    for seq in range(1, count + 1):
        role, source = draw(kinds)
        if source == "assistant-tool-only":
            messages.append(SourceMessage(seq, "assistant", "assistant", [{"type": "tool_use"}]))
        else:
            messages.append(text_message(seq, role, source, draw(text)))
    return messages


@st.composite
def sessions_and_budgets(draw, text=marker_free_text):
    """A session and a budget around its interesting range: from a little below the fixed
    fields to a little above the whole surface, so dropping and shortening both happen."""
    messages = draw(sessions(text=text))
    whole = build_snapshot(messages, session_id="S", max_bytes=10**9)
    full = utf8_len(tag_safe_json(whole.as_json()))
    fixed = utf8_len(tag_safe_json({**whole.as_json(), "conversation": []}))
    anywhere = st.integers(max(1, fixed - 5), full + 5)
    mostly_feasible = st.integers(min(full, fixed + 150), full + 5)
    return messages, draw(st.one_of(anywhere, mostly_feasible))
