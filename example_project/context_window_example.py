"""Compaction and the context read (docs/context-window.md).

A conversation outgrows its budget; the host summarizes the oldest part and compacts, and the
context read then returns the summary and the recent tail, while the transcript stays whole.
Run after ``python manage.py migrate``::

    python -m example_project.context_window_example
"""

from __future__ import annotations

import os


def main() -> None:
    """Append six turns, read the context within a budget, compact, read it again."""
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "example_project.settings")
    django.setup()
    from cortex_sessions import services

    scope = "org=acme/user=42"
    session = services.create_session(scope=scope, agent_id="support-bot")
    turns = [
        ("user", "My build fails on the billing module."),
        ("assistant", "Which test fails, and with what error?"),
        ("user", "test_invoice_totals: Decimal('10.00') != Decimal('10.0')."),
        ("assistant", "Compare quantized values: quantize both to two places."),
        ("user", "That fixed it. Can you also check the tax rounding?"),
        ("assistant", "Tax is rounded per line; round the total instead."),
    ]
    services.append_messages(
        scope=scope,
        session_id=session.pk,
        messages=[{"role": role, "content": text} for role, text in turns],
    )

    window = services.context_messages(scope=scope, session_id=session.pk, max_tokens=40)
    print("within 40 tokens:", [m.seq for m in window.messages], "truncated", window.truncated)

    result = services.compact_session(
        scope=scope,
        session_id=session.pk,
        through_seq=4,
        summary="The billing test failed on Decimal scale; quantizing both sides fixed it.",
        usage={"input_tokens": 180, "output_tokens": 20, "cost": "0.000410"},
    )
    summary = result.messages[0]
    print("summary seq", summary.seq, "compacts through", summary.compacts_through_seq)

    window = services.context_messages(scope=scope, session_id=session.pk)
    print("context:", [m.seq for m in window.messages], "tokens", window.tokens)
    session = services.get_session(scope=scope, session_id=session.pk)
    print("transcript:", session.message_count, "messages; context_tokens", session.context_tokens)


if __name__ == "__main__":
    main()
