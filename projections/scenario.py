"""Synthetic but realistic event streams, for tests and bench/projection.py.

`control_plane()` registers a node with accelerators, deployments, clients and residencies;
`traffic(n)` is the hot-path mix per request: RequestAccepted + LeaseGranted + LeaseReleased +
RequestCompleted (plus an occasional failure, rejection, pressure change or eviction); with
`carried`, each request as one that ended while its gateway held its acceptance: no
RequestAccepted, the end event carrying it (docs/event-log.md, "A request's records").
Each item is (aggregate or None for MF_REQUESTS, aggregate id or capability, event).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

from streams.events import control as c
from streams.events import requests as r
from streams.events import serving as s
from streams.events.base import Event
from streams.subjects import Aggregate

GIB = 1024**3
Item = tuple[Aggregate | None, str, Event]
CAPABILITY = "rag.embedding@1"
EXPIRES = datetime(2030, 1, 1, tzinfo=UTC)
ACCEPTED_FROM = datetime(2026, 1, 1, tzinfo=UTC)


def control_plane(run: str, accelerators: int = 2, deployments: int = 4, clients: int = 8) -> list[Item]:
    node = f"{run}-node"
    accs = [f"{run}-gpu{i}" for i in range(accelerators)]
    items: list[Item] = [
        (
            None,
            "",
            c.NodeRegistered(
                node_id=node,
                hostname="h1",
                hardware_fingerprint="fp",
                accelerators=tuple(
                    c.AcceleratorSpec(accelerator_id=a, kind="gpu", name="H200", total_bytes=80 * GIB)
                    for a in accs
                ),
                protocol_capabilities=("deployment.load.v1",),
                runtimes=("onnxruntime-cpu",),
                agent_version="1",
            ),
        ),
    ]
    items[0] = (Aggregate.NODE, node, items[0][2])
    for i in range(clients):
        items.append(
            (
                Aggregate.CLIENT,
                f"{run}-client{i}",
                c.ClientCreated(
                    client_id=f"{run}-client{i}",
                    name=f"client {i}",
                    scopes=(CAPABILITY,),
                    requests_per_minute=600,
                    max_concurrency=8,
                ),
            )
        )
    for i in range(deployments):
        dep, acc = f"{run}-dep{i}", accs[i % accelerators]
        items.append(
            (
                Aggregate.DEPLOYMENT,
                dep,
                s.DeploymentPromoted(
                    deployment_id=dep,
                    capability=CAPABILITY,
                    candidate_id=f"{run}-cand{i}",
                    approval_id=f"{run}-appr{i}",
                    artifact_set_id=f"{run}-as{i}",
                    model_name="minilm",
                    channel="stable",
                    envelope=s.ResourceEnvelope(
                        required_bytes=2 * GIB,
                        peak_bytes=3 * GIB,
                        per_request_bytes=GIB // 8,
                        cold_load_ms=900.0,
                    ),
                ),
            )
        )
        items.append(
            (
                Aggregate.ACCELERATOR,
                acc,
                s.ResidencyLoadRequested(
                    load_id=f"{run}-load{i}",
                    accelerator_id=acc,
                    node_id=node,
                    deployment_id=dep,
                    required_bytes=3 * GIB,
                ),
            )
        )
        items.append(
            (
                Aggregate.ACCELERATOR,
                acc,
                s.ResidencyLoading(
                    load_id=f"{run}-load{i}", accelerator_id=acc, deployment_id=dep, generation=1
                ),
            )
        )
        items.append(
            (
                Aggregate.ACCELERATOR,
                acc,
                s.ResidencyLoaded(
                    load_id=f"{run}-load{i}",
                    accelerator_id=acc,
                    deployment_id=dep,
                    generation=1,
                    runtime="onnxruntime",
                    baseline_bytes=GIB,
                    loaded_bytes=3 * GIB,
                    peak_bytes=3 * GIB + GIB // 2,
                    measured_bytes=2 * GIB,
                    cold_load_ms=850.0,
                ),
            )
        )
    return items


def traffic(
    run: str,
    requests: int,
    seed: int = 7,
    accelerators: int = 2,
    deployments: int = 4,
    clients: int = 8,
    carried: bool = False,
) -> Iterator[Item]:
    rnd = random.Random(seed)
    for n in range(requests):
        rid, lease = f"{run}-r{n}", f"{run}-l{n}"
        dep_i = rnd.randrange(deployments)
        dep, acc = f"{run}-dep{dep_i}", f"{run}-gpu{dep_i % accelerators}"
        client = f"{run}-client{rnd.randrange(clients)}"
        acceptance = r.Acceptance(
            input_sha256=f"{n:064x}",
            shape_bucket="items:1-4/chars:0-512",
            items=rnd.randint(1, 4),
            accepted_at=ACCEPTED_FROM + timedelta(milliseconds=n),
        )
        accepted = acceptance if carried else None
        if not carried:
            yield None, CAPABILITY, acceptance.alone(rid, client, CAPABILITY, "")
        roll = rnd.random()
        if roll < 0.01:
            yield (
                None,
                CAPABILITY,
                r.RequestRejected(
                    request_id=rid,
                    client_id=client,
                    capability=CAPABILITY,
                    code="RATE_LIMITED",
                    http_status=429,
                ),
            )
            continue
        yield (
            Aggregate.ACCELERATOR,
            acc,
            s.LeaseGranted(
                lease_id=lease,
                accelerator_id=acc,
                deployment_id=dep,
                request_id=rid,
                client_id=client,
                reserved_bytes=GIB // 8,
                expires_at=EXPIRES + timedelta(seconds=n),
                decision_fingerprint=f"fp{n}",
            ),
        )
        yield (
            Aggregate.ACCELERATOR,
            acc,
            s.LeaseReleased(
                lease_id=lease, accelerator_id=acc, outcome="failed" if roll < 0.02 else "completed"
            ),
        )
        if roll < 0.02:
            yield (
                None,
                CAPABILITY,
                r.RequestFailed(
                    request_id=rid,
                    client_id=client,
                    capability=CAPABILITY,
                    code="WORKER_FAILED",
                    http_status=502,
                    deployment_id=dep,
                    accepted=accepted,
                ),
            )
            continue
        total = round(rnd.uniform(2.0, 40.0), 3)
        yield (
            None,
            CAPABILITY,
            r.RequestCompleted(
                request_id=rid,
                client_id=client,
                capability=CAPABILITY,
                deployment_id=dep,
                node_id=f"{run}-node",
                accelerator_id=acc,
                cold=roll > 0.995,
                latency=r.LatencyBreakdown(
                    validation_ms=0.05,
                    scheduling_ms=0.1,
                    dispatch_ms=0.3,
                    worker_inference_ms=total * 0.7,
                    total_ms=total,
                ),
                usage=r.Usage(items=2, input_tokens=rnd.randint(5, 500)),
                accepted=accepted,
            ),
        )
        if roll > 0.998:
            yield (
                Aggregate.ACCELERATOR,
                acc,
                s.PressureChanged(
                    accelerator_id=acc, previous="NORMAL", current="ELEVATED", utilization=0.72
                ),
            )
