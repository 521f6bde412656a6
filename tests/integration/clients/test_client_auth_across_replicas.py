"""Keys, revocation, rotation, expiry and disable, seen by two gateway replicas."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

import pytest

from eventstore.store import EventStore, ExpectedVersion
from gateway.clients.directory import ClientDirectory
from gateway.clients.service import ClientService, client_id_for
from streams.codes import ServingError
from streams.events.control import ProjectBoundToChannel, ProjectRegistered
from streams.subjects import Aggregate
from tests.integration.clients.conftest import Gateways


def bearer(key: str) -> str:
    return f"Bearer {key}"


def assert_rejected(directory: ClientDirectory, key: str, status: int) -> ServingError:
    with pytest.raises(ServingError) as caught:
        directory.authenticate(bearer(key))
    assert caught.value.code == "CAPABILITY_NOT_AUTHORIZED"
    assert caught.value.http_status == status
    return caught.value


async def test_a_created_key_authenticates_on_both_replicas(
    service: ClientService, gateways: Gateways, unique_name: str
) -> None:
    issued = await service.create(unique_name, ["rag.embedding@1"], requests_per_minute=7, max_concurrency=2)
    await gateways.applied(issued.sequence)
    for replica in gateways.both:
        principal = replica.directory.authenticate(bearer(issued.key))
        assert (principal.client_id, principal.name, principal.credential_id) == (
            issued.client_id,
            unique_name,
            issued.credential_id,
        )
        assert (principal.requests_per_minute, principal.max_concurrency) == (7, 2)
        replica.directory.authorize(principal, "rag.embedding@1")
        with pytest.raises(ServingError) as caught:
            replica.directory.authorize(principal, "rag.reranking@1")
        assert caught.value.http_status == 403


async def test_a_revoked_key_is_rejected_by_both_replicas_within_a_second(
    service: ClientService, gateways: Gateways, unique_name: str
) -> None:
    issued = await service.create(unique_name, ["rag.embedding@1"])
    await gateways.applied(issued.sequence)
    revoked_at = await service.revoke(issued.client_id, issued.credential_id, "leaked")
    await gateways.applied(revoked_at)  # each waits at most 1 s
    for replica in gateways.both:
        assert "revoked" in assert_rejected(replica.directory, issued.key, 401).message


async def test_rotation_grace_keeps_the_old_key_until_grace_until_then_not(
    service: ClientService, gateways: Gateways, unique_name: str
) -> None:
    first = await service.create(unique_name, ["rag.embedding@1"])
    second = await service.rotate(first.client_id, grace_s=60)
    await gateways.applied(second.sequence)
    for replica in gateways.both:
        assert replica.directory.authenticate(bearer(first.key)).credential_id == first.credential_id
        assert replica.directory.authenticate(bearer(second.key)).credential_id == second.credential_id
    gateways.wall.offset = timedelta(seconds=61)
    for replica in gateways.both:
        assert_rejected(replica.directory, first.key, 401)
        assert replica.directory.authenticate(bearer(second.key)).credential_id == second.credential_id


async def test_rotation_without_grace_stops_the_old_key_at_once(
    service: ClientService, gateways: Gateways, unique_name: str
) -> None:
    first = await service.create(unique_name, ["rag.embedding@1"])
    second = await service.rotate(first.client_id)
    await gateways.applied(second.sequence)
    for replica in gateways.both:
        assert_rejected(replica.directory, first.key, 401)
        replica.directory.authenticate(bearer(second.key))


async def test_rotating_a_client_whose_only_key_was_revoked_gives_it_a_working_key(
    service: ClientService, gateways: Gateways, unique_name: str
) -> None:
    # The way back after revoking a leaked key (as in the seed): the name is taken, so `create`
    # cannot help, and rotate issues the client a fresh key; the revoked one stays refused.
    first = await service.create(unique_name, ["rag.embedding@1"])
    await service.revoke(first.client_id, first.credential_id, "leaked")
    second = await service.rotate(first.client_id, grace_s=60)
    await gateways.applied(second.sequence)
    for replica in gateways.both:
        assert replica.directory.authenticate(bearer(second.key)).credential_id == second.credential_id
        assert "revoked" in assert_rejected(replica.directory, first.key, 401).message


async def test_an_expired_credential_is_rejected(
    service: ClientService, gateways: Gateways, unique_name: str
) -> None:
    issued = await service.create(unique_name, ["rag.embedding@1"], expires_in=timedelta(minutes=5))
    await gateways.applied(issued.sequence)
    gateways.a.directory.authenticate(bearer(issued.key))
    gateways.wall.offset = timedelta(minutes=5, seconds=1)
    for replica in gateways.both:
        assert "expired" in assert_rejected(replica.directory, issued.key, 401).message


async def test_a_disabled_client_is_rejected_with_403_and_enabling_restores_it(
    service: ClientService, gateways: Gateways, unique_name: str
) -> None:
    issued = await service.create(unique_name, ["rag.embedding@1"])
    await gateways.applied(await service.disable(issued.client_id, "abuse"))
    for replica in gateways.both:
        assert_rejected(replica.directory, issued.key, 403)
    await gateways.applied(await service.enable(issued.client_id))
    for replica in gateways.both:
        replica.directory.authenticate(bearer(issued.key))


async def test_an_unknown_or_missing_key_is_401(gateways: Gateways) -> None:
    for header in (None, "Bearer mf_" + "A" * 43, "Token abc"):
        with pytest.raises(ServingError) as caught:
            gateways.a.directory.authenticate(header)
        assert caught.value.http_status == 401


async def test_a_directory_started_later_catches_up_before_it_is_ready(
    service: ClientService, gateways: Gateways, unique_name: str
) -> None:
    issued = await service.create(unique_name, ["rag.embedding@1"])
    await service.revoke(issued.client_id, issued.credential_id)
    late = ClientDirectory(gateways.a.connection.client)
    assert not late.ready
    await late.start()
    await late.wait_ready(timeout=5.0)
    try:
        assert late.ready
        assert_rejected(late, issued.key, 401)
        assert late.client(issued.client_id) is not None
    finally:
        await late.close()


async def test_a_client_for_an_unknown_project_is_refused_and_nothing_is_recorded(
    service: ClientService, store: EventStore, unique_name: str
) -> None:
    with pytest.raises(ServingError) as caught:
        await service.create(unique_name, ["rag.embedding@1"], project_id=f"pr-{uuid.uuid4().hex[:20]}")
    assert (caught.value.code, caught.value.http_status) == ("PROJECT_NOT_FOUND", 404)
    assert await store.load(Aggregate.CLIENT, client_id_for(unique_name)) == ([], 0)

    project_id = f"pr-{uuid.uuid4().hex[:20]}"
    registered = ProjectRegistered(project_id=project_id, name=project_id)
    await store.append(Aggregate.PROJECT, project_id, [registered], ExpectedVersion.NO_STREAM)
    issued = await service.create(unique_name, ["rag.embedding@1"], project_id=project_id)
    state = await service.get(issued.client_id)
    assert state is not None
    assert state.project_id == project_id


async def test_client_names_are_unique_even_when_created_concurrently(
    service: ClientService, unique_name: str
) -> None:
    outcomes = await asyncio.gather(
        *(service.create(unique_name, ["rag.embedding@1"]) for _ in range(4)), return_exceptions=True
    )
    created = [o for o in outcomes if not isinstance(o, BaseException)]
    refused = [o for o in outcomes if isinstance(o, ServingError)]
    assert len(created) == 1
    assert len(refused) == 3
    assert {e.code for e in refused} == {"CLIENT_EXISTS"}


async def test_listing_clients_shows_prefixes_never_hashes_or_keys(
    service: ClientService, unique_name: str
) -> None:
    from gateway.admin.clients_cli import format_client

    issued = await service.create(unique_name, ["rag.embedding@1"])
    listed = {state.client_id: state for state in await service.all_clients()}
    state = listed[issued.client_id]
    text = format_client(state)
    assert issued.key_prefix in text
    assert issued.key not in text
    assert state.credentials[0].key_sha256 not in text
    assert issued.key not in repr(issued)


async def test_a_project_channel_bound_later_reaches_both_replicas_within_a_second(
    service: ClientService, store: EventStore, gateways: Gateways, unique_name: str
) -> None:
    project_id = f"pr-{uuid.uuid4().hex[:20]}"
    registered = ProjectRegistered(project_id=project_id, name=project_id)
    await store.append(Aggregate.PROJECT, project_id, [registered], ExpectedVersion.NO_STREAM)
    issued = await service.create(unique_name, ["rag.embedding@1"], project_id=project_id)
    await gateways.applied(issued.sequence)
    for replica in gateways.both:
        with pytest.raises(ServingError) as caught:
            replica.directory.authorize(replica.directory.authenticate(bearer(issued.key)), "rag.embedding@1")
        assert (caught.value.code, caught.value.http_status) == ("PROJECT_CAPABILITY_NOT_BOUND", 403)
    bound = ProjectBoundToChannel(project_id=project_id, capability="rag.embedding@1", channel="stable")
    await gateways.applied(await store.append(Aggregate.PROJECT, project_id, [bound], ExpectedVersion.ANY))
    for replica in gateways.both:
        replica.directory.authorize(replica.directory.authenticate(bearer(issued.key)), "rag.embedding@1")
