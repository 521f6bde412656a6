"""A model's health check reports a runtime that crashes or hangs as unhealthy; it never raises."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from nodeagent.agent import operations


class _Server:
    def __init__(self, check: object) -> None:
        self._check = check

    async def check(self) -> None:
        await self._check()  # type: ignore[operator]


async def _crashes() -> None:
    raise RuntimeError("onnxruntime: a kernel failed")


async def _hangs() -> None:
    await asyncio.Event().wait()


async def test_a_crashing_test_inference_is_unhealthy() -> None:
    residency = SimpleNamespace(deployment_id="emb", server=_Server(_crashes))
    healthy, detail = await operations._checked(residency)  # type: ignore[arg-type]
    assert (healthy, detail) == (False, "the test inference failed: RuntimeError")


async def test_a_test_inference_that_never_finishes_is_unhealthy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(operations, "HEALTH_CHECK_S", 0.05)
    residency = SimpleNamespace(deployment_id="emb", server=_Server(_hangs))
    healthy, detail = await operations._checked(residency)  # type: ignore[arg-type]
    assert not healthy
    assert "did not finish" in detail
