"""A deployment's cap that cannot be checked refuses the request with its own code: the slot
store not answering is a clear 503, never an INTERNAL_ERROR, and nothing runs uncounted."""

from __future__ import annotations

import time
from typing import cast

import pytest
from nats.aio.client import Client
from nats.errors import TimeoutError as NatsTimeoutError

from gateway.clients.limits import RequestLimiter
from gateway.clients.permit import Permit
from gateway.deployments.model import DeploymentState
from gateway.serving.caps import DeploymentGate
from streams.codes import ServingError
from streams.events import serving as s


class SilentSlotStore:
    """A limiter whose slot store never answers, as while NATS is down."""

    async def take_slot(self, group: str, size: int) -> Permit | None:
        raise NatsTimeoutError


def capped_experiment() -> DeploymentState:
    return DeploymentState(
        deployment_id="exp-1",
        capability="rag.embedding@1",
        candidate_id="cand-1",
        artifact_set_id="set-1",
        model_name="m",
        channel="experiment",
        envelope=s.ResourceEnvelope(required_bytes=1, peak_bytes=1, per_request_bytes=1, cold_load_ms=1.0),
        residency=s.ResidencyPolicy(),
        embedding_space=None,
        caps=s.EXPERIMENT_CAPS,
    )


async def test_a_cap_whose_slot_store_does_not_answer_is_refused_limits_backend_unavailable() -> None:
    gate = DeploymentGate(cast(RequestLimiter, SilentSlotStore()), cast(Client, None))
    with pytest.raises(ServingError) as refused:
        await gate.enter(capped_experiment(), time.time() + 30)
    assert (refused.value.code, refused.value.http_status) == ("LIMITS_BACKEND_UNAVAILABLE", 503)
