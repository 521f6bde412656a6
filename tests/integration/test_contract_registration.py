"""The capability contracts are on the record: each version registered once however often and by
however many processes provisioning runs, and a definition changed under a registered version stops
a gateway's start, naming the capability@version and what differs."""

from __future__ import annotations

import asyncio

import msgspec
import pytest

from eventstore.store import EventStore, ExpectedVersion
from gateway.contracts import ContractChanged, register_contracts, registration
from gateway.process import start_replica
from modelforge.cli import _provision
from modelforge.devstack.nats_server import NatsServer
from streams.contracts import CONTRACTS, EMBEDDING, Limits
from streams.envelope import new_id
from streams.subjects import Aggregate, capability_token


async def registrations(store: EventStore) -> dict[str, int]:
    counts = {}
    for capability in CONTRACTS:
        records, _ = await store.load(Aggregate.CAPABILITY, capability_token(capability))
        counts[capability] = len(records)
    return counts


async def test_provisioning_twice_registers_each_contract_once(
    private_nats: NatsServer, private_store: EventStore
) -> None:
    await _provision(private_nats.url)
    await _provision(private_nats.url)

    assert await registrations(private_store) == dict.fromkeys(CONTRACTS, 1)


async def test_processes_registering_at_once_register_each_contract_once(private_store: EventStore) -> None:
    registered = await asyncio.gather(*(register_contracts(private_store) for _ in range(3)))

    assert sorted(c for each in registered for c in each) == sorted(CONTRACTS)
    assert await registrations(private_store) == dict.fromkeys(CONTRACTS, 1)


async def test_a_definition_changed_under_a_registered_version_stops_the_gateway_start(
    private_nats: NatsServer, private_store: EventStore
) -> None:
    earlier = registration(msgspec.structs.replace(EMBEDDING, limits=Limits(max_items=8)))
    await private_store.append(
        Aggregate.CAPABILITY, capability_token(EMBEDDING.capability), [earlier], ExpectedVersion.NO_STREAM
    )

    with pytest.raises(ContractChanged, match=r"rag\.embedding@1 differs in limits"):
        await start_replica(f"gw-{new_id()[:8]}", private_nats.url)


async def test_a_registered_digest_that_differs_is_refused_naming_the_digest(
    private_store: EventStore,
) -> None:
    tampered = msgspec.structs.replace(registration(EMBEDDING), definition_sha256="0" * 64)
    await private_store.append(
        Aggregate.CAPABILITY, capability_token(EMBEDDING.capability), [tampered], ExpectedVersion.NO_STREAM
    )

    with pytest.raises(ContractChanged, match=r"rag\.embedding@1 differs in definition_sha256"):
        await register_contracts(private_store)
