"""Fixtures of the agent-runtime adapter tests (docs/design.md §13)."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _no_sdk_tracing(monkeypatch):
    """No adapter test talks to the network: switch the OpenAI Agents SDK's tracing off."""
    monkeypatch.setenv("OPENAI_AGENTS_DISABLE_TRACING", "1")
    try:
        from agents import set_tracing_disabled
    except ImportError:
        return
    set_tracing_disabled(True)
