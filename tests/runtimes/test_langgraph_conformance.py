"""``CortexCheckpointSaver`` passes LangGraph's own conformance suite (docs/design.md §19.1).

The PyPI package ``langgraph-checkpoint-conformance`` drives a saver through its async methods;
it runs twice: against the saver itself, and against a wrapper whose async methods call the
saver's *sync* methods, so both halves of the interface pass the same suite. Every base
capability must be detected and pass.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest

pytest.importorskip("langgraph.checkpoint.conformance")

from asgiref.sync import sync_to_async
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import BASE_CAPABILITIES

from cortex_sessions.integrations.langgraph import CortexCheckpointSaver
from tests.asyncio_support import async_test

pytestmark = pytest.mark.django_db

SCOPE = "org=acme/team=graphs"


class SyncDriven(BaseCheckpointSaver[str]):
    """Runs the conformance suite's async calls through ``inner``'s sync methods."""

    def __init__(self, inner: CortexCheckpointSaver) -> None:
        super().__init__(serde=inner.serde)
        self.inner = inner

    def get_next_version(self, current: Any, channel: None) -> str:
        return self.inner.get_next_version(current, channel)

    async def aget_tuple(self, config):
        return await sync_to_async(lambda: self.inner.get_tuple(config))()

    async def alist(self, config, *, filter=None, before=None, limit=None) -> AsyncIterator[Any]:
        found = await sync_to_async(
            lambda: list(self.inner.list(config, filter=filter, before=before, limit=limit))
        )()
        for item in found:
            yield item

    async def aput(self, config, checkpoint, metadata, new_versions):
        return await sync_to_async(
            lambda: self.inner.put(config, checkpoint, metadata, new_versions)
        )()

    async def aput_writes(
        self, config, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ):
        await sync_to_async(lambda: self.inner.put_writes(config, writes, task_id, task_path))()

    async def adelete_thread(self, thread_id: str) -> None:
        await sync_to_async(lambda: self.inner.delete_thread(thread_id))()


@checkpointer_test(name="CortexCheckpointSaver (async)")
async def cortex_async():
    yield CortexCheckpointSaver(scope=SCOPE, agent_id="conformance")


@checkpointer_test(name="CortexCheckpointSaver (sync)")
async def cortex_sync():
    yield SyncDriven(CortexCheckpointSaver(scope=SCOPE, agent_id="conformance"))


@pytest.mark.parametrize("registered", [cortex_async, cortex_sync], ids=["async", "sync"])
@async_test
async def test_passes_the_langgraph_checkpoint_conformance_suite(registered):
    report = await validate(registered)
    failures = {name: result.failures for name, result in report.results.items() if result.failures}
    assert failures == {}
    detected = {name for name, result in report.results.items() if result.detected}
    assert {capability.value for capability in BASE_CAPABILITIES} <= detected
    assert report.passed_all_base()
