"""Run ``async def`` tests the way Django's own test case does (``SimpleTestCase._setup_and_call``).

A coroutine test is wrapped in ``async_to_sync``, so code it awaits through
``sync_to_async(thread_sensitive=True)`` — every async service and runtime adapter — runs back on
the test's thread and sees the test's database connection and transaction. (pytest-asyncio would
run the ORM calls on asgiref's shared worker thread, outside the test transaction.)
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine
from typing import Any

from asgiref.sync import async_to_sync


def async_test(test: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """Turn an ``async def`` test into a synchronous one pytest and pytest-django can run.

    Fixtures are passed through unchanged (pytest reads the wrapped signature).
    """

    @functools.wraps(test)
    def run(*args: Any, **kwargs: Any) -> None:
        async_to_sync(test)(*args, **kwargs)

    return run
