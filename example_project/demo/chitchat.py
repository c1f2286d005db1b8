"""Convert the Chit-Chat Challenge corpus (PyPI ``chitchat-dataset``) to the import format.

The package ships the corpus as one JSON file, ``chitchat_dataset/dataset.json``: an object of
7,168 conversations keyed by id, each ``{"messages": [[utterance, ...], ...], "start"?,
"prompt"?, "ratings"?}`` where an utterance is ``{"text", "timestamp", "sender"}``. (Its
``Dataset`` class is only a ``dict`` over that file, opened without being closed; reading the
file directly is the same data.)

One conversation becomes one line of ``cortex_sessions.transfer``'s format: the first speaker's
messages are ``user``, the other speaker's ``assistant``; consecutive utterances of one speaker
form one message (joined by newlines, timestamped with the first); blank utterances are
dropped; the first user line is the title; the corpus id is the conversation ``id``, so a
re-import skips it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from importlib import resources
from itertools import islice
from typing import Any

from cortex_sessions.content import preview

__all__ = ["AGENT_ID", "TITLE_MAX_CHARS", "convert", "load_corpus", "read_conversations"]

#: The agent the demo's sessions belong to.
AGENT_ID = "chitchat"
#: Longest session title (docs/design.md §3.1).
TITLE_MAX_CHARS = 500
_CORPUS_FIELDS = ("prompt", "start", "ratings")


def load_corpus() -> dict[str, Any]:
    """The whole corpus, ``{conversation_id: conversation}``, in the package's order.

    Raises:
        ModuleNotFoundError: ``chitchat-dataset`` is not installed (``pip install -e .[demo]``).
    """
    path = resources.files("chitchat_dataset").joinpath("dataset.json")
    with path.open("r", encoding="utf-8") as handle:
        return json.load(handle)


def convert(conversation_id: str, conversation: Mapping[str, Any]) -> dict[str, Any] | None:
    """One corpus conversation as a conversation object of the import format.

    Args:
        conversation_id: the corpus id (kept as the conversation's ``id``).
        conversation: the corpus record.

    Returns:
        ``{"id", "title", "metadata", "messages"}``, or ``None`` when it has no non-blank
        utterance.
    """
    messages: list[dict[str, Any]] = []
    speakers: list[str] = []
    current: str | None = None
    for turn in conversation.get("messages", []):
        for utterance in turn:
            text = utterance.get("text") or ""
            if not text.strip():
                continue
            sender = utterance.get("sender")
            if sender not in speakers:
                speakers.append(sender)
            if messages and sender == current:
                messages[-1]["content"] += "\n" + text
                continue
            current = sender
            message = {"role": "user" if sender == speakers[0] else "assistant", "content": text}
            if utterance.get("timestamp"):
                message["created_at"] = utterance["timestamp"]
            messages.append(message)
    if not messages:
        return None
    first_line = messages[0]["content"].split("\n", 1)[0].strip()
    metadata = {"corpus": "chitchat"}
    metadata.update({key: conversation[key] for key in _CORPUS_FIELDS if key in conversation})
    return {
        "id": conversation_id,
        "title": preview(first_line, TITLE_MAX_CHARS - 1),
        "metadata": metadata,
        "messages": messages,
    }


def read_conversations(limit: int | None = None) -> Iterator[dict[str, Any]]:
    """The first ``limit`` convertible conversations of the corpus (all with ``None``).

    Conversations without any text are passed over and do not count towards ``limit``. The
    order is the corpus's, so the same ``limit`` always gives the same conversations.
    """
    converted = (convert(key, value) for key, value in load_corpus().items())
    return islice((item for item in converted if item is not None), limit)
