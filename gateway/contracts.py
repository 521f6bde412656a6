"""The capability contracts on the record: each version is registered once, as
`CapabilityContractRegistered` on its capability aggregate with NO_STREAM expected (replicas that
start together register it once), and a definition that differs from the one registered under its
version stops the start: a published contract never changes, a change is a new version.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

import msgspec
from nats.aio.client import Client

from eventstore import reading
from eventstore.errors import ConcurrencyConflict
from eventstore.store import EventStore, ExpectedVersion
from streams import subjects
from streams.contracts import CONTRACTS, CapabilityContract
from streams.events import control as c
from streams.subjects import Aggregate, capability_token

_DEFINITION = ("capability", "input_schema", "output_schema", "upgrade_class", "limits")


class ContractChanged(Exception):
    """A contract's definition differs from the one registered under its version."""


def definition_sha256(event: c.CapabilityContractRegistered) -> str:
    """sha256 of the definition's canonical JSON (keys sorted at every depth)."""
    fields = {name: getattr(event, name) for name in _DEFINITION}
    return hashlib.sha256(msgspec.json.encode(fields, order="sorted")).hexdigest()


def registration(contract: CapabilityContract) -> c.CapabilityContractRegistered:
    event = c.CapabilityContractRegistered(
        capability=contract.capability,
        input_schema=contract.input_schema(),
        output_schema=contract.output_schema(),
        upgrade_class=contract.upgrade_class,
        limits=msgspec.to_builtins(contract.limits),
    )
    return msgspec.structs.replace(event, definition_sha256=definition_sha256(event))


def differences(
    registered: c.CapabilityContractRegistered, wanted: c.CapabilityContractRegistered
) -> list[str]:
    """What differs between the registered definition and this build's, by field; the digest alone
    when the fields match but the digest recorded does not."""
    recorded = registered.definition_sha256 or definition_sha256(registered)
    if recorded == wanted.definition_sha256:
        return []
    canonical = msgspec.json.Encoder(order="sorted").encode
    fields = [n for n in _DEFINITION if canonical(getattr(registered, n)) != canonical(getattr(wanted, n))]
    return fields or ["definition_sha256"]


async def register_contracts(
    store: EventStore, contracts: Iterable[CapabilityContract] = CONTRACTS.values()
) -> list[str]:
    """Register each contract version not on the record yet; returns those registered now. Raises
    ContractChanged naming every capability@version whose definition differs from the registered."""
    registered_now, changed = [], []
    for contract in contracts:
        wanted = registration(contract)
        aggregate_id = capability_token(contract.capability)
        records, _ = await store.load(Aggregate.CAPABILITY, aggregate_id)
        if not records:
            try:
                await store.append(Aggregate.CAPABILITY, aggregate_id, [wanted], ExpectedVersion.NO_STREAM)
                registered_now.append(contract.capability)
                continue
            except ConcurrencyConflict:  # another process registered it first: compare with theirs
                records, _ = await store.load(Aggregate.CAPABILITY, aggregate_id)
        first = records[0].event
        assert isinstance(first, c.CapabilityContractRegistered)
        if differing := differences(first, wanted):
            changed.append(f"{contract.capability} differs in {', '.join(differing)}")
    if changed:
        raise ContractChanged(
            "capability contracts changed under a registered version (a published contract never "
            f"changes: publish the change as a new version): {'; '.join(changed)}"
        )
    return registered_now


async def registered_contracts(client: Client) -> dict[str, dict[str, object]]:
    """The registered contracts by capability@version, as first registered, read from the log."""
    records = await reading.read_subject_range(
        client,
        subjects.EVENTS_STREAM,
        f"{subjects.EVENTS_PREFIX}.{Aggregate.CAPABILITY.value}.*.{c.CapabilityContractRegistered.__name__}",
    )
    out: dict[str, dict[str, object]] = {}
    for record in records:
        event = record.event
        if isinstance(event, c.CapabilityContractRegistered) and event.capability not in out:
            view: dict[str, object] = msgspec.to_builtins(event)
            view.pop("type", None)
            view["registered_at"] = record.envelope.occurred_at.isoformat() if record.envelope else None
            out[event.capability] = view
    return out
