"""Usage the agent runtimes report, as a message's ``usage`` (docs/design.md §16.1, §16.5).

Pure functions: nothing here reads or writes the database or imports an SDK. The adapters call
them only when the host turns recording on (``CortexSession(record_usage=True)``,
``CortexSessionService(record_usage=True)``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["adk_usage", "attach_usage", "openai_run_usage"]

#: The attribute a run's context wrapper keeps what was already recorded of its usage in.
_RECORDED = "_cortex_sessions_recorded_usage"


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _usage(input_tokens: int, output_tokens: int, cached: int, reasoning: int) -> dict[str, int]:
    usage = {
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "cached_input_tokens": cached,
        "reasoning_tokens": reasoning,
    }
    return {key: value for key, value in usage.items() if value}


def openai_run_usage(wrapper: Any) -> dict[str, int] | None:
    """What the OpenAI Agents SDK's run behind ``wrapper`` (its ``RunContextWrapper``) used
    since this function last read it: the run's ``Usage`` is cumulative, so each call takes
    the part not yet recorded and remembers the rest on the wrapper.

    Returns:
        A §16.1 usage object (``input_tokens``, ``output_tokens``, ``cached_input_tokens``,
        ``reasoning_tokens``, the zero ones left out), or ``None`` when nothing new was used.
    """
    usage = getattr(wrapper, "usage", None)
    if usage is None:
        return None
    totals = (
        _count(getattr(usage, "input_tokens", 0)),
        _count(getattr(usage, "output_tokens", 0)),
        _count(getattr(getattr(usage, "input_tokens_details", None), "cached_tokens", 0)),
        _count(getattr(getattr(usage, "output_tokens_details", None), "reasoning_tokens", 0)),
    )
    before = getattr(wrapper, _RECORDED, (0, 0, 0, 0))
    try:
        setattr(wrapper, _RECORDED, totals)
    except AttributeError:  # a wrapper that takes no attributes: record nothing twice
        return None
    delta = _usage(*(max(0, now - then) for now, then in zip(totals, before, strict=True)))
    return delta or None


def adk_usage(metadata: Any, model: str | None = None) -> dict[str, Any] | None:
    """An ADK event's ``usage_metadata`` (``GenerateContentResponseUsageMetadata``) as a §16.1
    usage object, with ``model`` (the event's ``model_version``) when given; ``None`` when it
    reports nothing."""
    if metadata is None:
        return None
    usage: dict[str, Any] = _usage(
        _count(getattr(metadata, "prompt_token_count", 0)),
        _count(getattr(metadata, "candidates_token_count", 0)),
        _count(getattr(metadata, "cached_content_token_count", 0)),
        _count(getattr(metadata, "thoughts_token_count", 0)),
    )
    if not usage:
        return None
    if isinstance(model, str) and 0 < len(model) <= 255:
        usage["model"] = model
    return usage


def attach_usage(messages: list[dict[str, Any]], usage: Mapping[str, Any] | None) -> None:
    """Put ``usage`` on the message that produced it: the last ``assistant`` message of
    ``messages`` (the model's answer), else the last one; nothing when ``usage`` is ``None``."""
    if not usage or not messages:
        return
    target = next(
        (message for message in reversed(messages) if message.get("role") == "assistant"),
        messages[-1],
    )
    target["usage"] = dict(usage)
