"""A model's health check reports a runtime that crashes or hangs as unhealthy; it never raises.
A crash is the worker's to report (by its type), a hang the agent's to bound."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from nodeagent.agent import operations
from nodeagent.worker.protocol import Answer, Call, Check, Failed
from nodeagent.worker.serve import Session


class _Server:
    async def check(self) -> None:
        raise RuntimeError("onnxruntime: a kernel failed")


class _Out:
    def __init__(self) -> None:
        self.sent: list[Answer] = []

    def send(self, answer: Answer) -> None:
        self.sent.append(answer)


class _HungWorker:
    async def check(self) -> None:
        await asyncio.Event().wait()


async def test_a_crashing_test_inference_is_answered_as_failed_by_its_type() -> None:
    out = _Out()
    session = Session(out)  # type: ignore[arg-type]
    session.warm = SimpleNamespace(server=_Server())  # type: ignore[assignment]
    await session.answer(Call(7, Check()))
    assert out.sent == [Answer(7, Failed("INFERENCE_FAILED", "the test inference failed: RuntimeError"))]


async def test_a_test_inference_that_never_finishes_is_unhealthy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(operations, "HEALTH_CHECK_S", 0.05)
    residency = SimpleNamespace(deployment_id="emb", worker=_HungWorker())
    healthy, detail = await operations._checked(residency)  # type: ignore[arg-type]
    assert not healthy
    assert "did not finish" in detail
