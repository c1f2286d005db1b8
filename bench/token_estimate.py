"""``python -m bench.token_estimate``: how the default token estimate (docs/design.md §16.2,
``cortex_sessions.tokens.estimate_tokens``) compares on real text, the Chit-Chat corpus of the
demo (the ``chitchat-dataset`` package, the ``demo`` extra).

No real tokenizer can be loaded here (tiktoken downloads its encodings at run time), so the
reference is OpenAI's documented rule of thumb for English: a token is about 3/4 of a word
(``words * 4 / 3`` tokens), plus the same per-message overhead. It prints the ratio of the
estimate to that reference over the whole corpus and the spread of the per-message ratios
(percentiles), for the messages as the demo imports them. Figures: docs/context.md.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cortex_sessions.tokens import MESSAGE_OVERHEAD_TOKENS, estimate_tokens
from example_project.demo.chitchat import convert, load_corpus


def reference_tokens(text: str) -> float:
    """OpenAI's rule of thumb: 4/3 tokens a word, plus the per-message overhead."""
    return len(text.split()) * 4 / 3 + MESSAGE_OVERHEAD_TOKENS


def main() -> None:
    """Print the comparison."""
    estimated = reference = 0.0
    ratios = []
    messages = 0
    for conversation_id, record in load_corpus().items():
        conversation = convert(conversation_id, record)
        if conversation is None:
            continue
        for message in conversation["messages"]:
            text = message["content"]
            mine = estimate_tokens(message["role"], [{"type": "text", "text": text}])
            theirs = reference_tokens(text)
            estimated += mine
            reference += theirs
            ratios.append(mine / theirs)
            messages += 1
    cuts = statistics.quantiles(ratios, n=20)
    print(f"messages: {messages:,}")
    print(f"estimate / rule of thumb, whole corpus: {estimated / reference:.3f}")
    print(
        f"per message: p5 {cuts[0]:.2f}, median {statistics.median(ratios):.2f}, p95 {cuts[-1]:.2f}"
    )


if __name__ == "__main__":
    main()
