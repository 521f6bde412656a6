"""Service clients over the admin API, as an operator without NATS access manages them: create with
an expiry, rotate, revoke, disable and enable; each takes effect on the gateway that answered it,
and input it cannot act on is refused with its code and records nothing."""

from __future__ import annotations

import httpx
import pytest

from gateway.admin import clients as admin_clients
from streams.envelope import new_id
from tests.integration.promotion.conftest import TOKEN, Stack
from tests.support.serving import InProcessGateway

pytestmark = pytest.mark.timeout(300)


async def status_with(stack: Stack, key: str) -> int:
    """What an embeddings call with `key` is answered (no model is served here: 503 once admitted)."""
    async with httpx.AsyncClient(base_url=stack.gateway.url, timeout=60) as http:
        response = await http.post(
            "/v1/embeddings", json={"input": "x"}, headers={"authorization": f"Bearer {key}"}
        )
    return response.status_code


async def test_an_operator_rotates_revokes_disables_and_enables_a_client_over_the_admin_api(
    stack: Stack,
) -> None:
    body = {"name": f"admin-{new_id()[:6]}", "scopes": ["rag.embedding@1"], "expires_in_s": 3600}
    first = await stack.post("/clients", body)
    assert isinstance(first, dict)
    assert first["expires_at"] is not None
    client = first["client_id"]
    assert await status_with(stack, first["key"]) not in (401, 403)

    second = await stack.post(f"/clients/{client}/rotate", {"grace_s": 600})
    assert isinstance(second, dict)
    assert await status_with(stack, first["key"]) not in (401, 403)  # in its grace period
    view = await stack.post(
        f"/clients/{client}/credentials/{first['credential_id']}/revoke", {"reason": "leaked"}
    )
    assert isinstance(view, dict)
    assert [c["revoked"] for c in view["credentials"]] == [True, False]
    assert await status_with(stack, first["key"]) == 401  # revocation cuts the grace short

    await stack.post(f"/clients/{client}/disable", {"reason": "abuse"})
    assert await status_with(stack, second["key"]) == 403
    await stack.post(f"/clients/{client}/enable")
    assert await status_with(stack, second["key"]) not in (401, 403)

    await stack.post(f"/clients/{client}/credentials/{second['credential_id']}/revoke")
    third = await stack.post(f"/clients/{client}/rotate")  # every key revoked: a fresh one
    assert isinstance(third, dict)
    assert await status_with(stack, third["key"]) not in (401, 403)

    listed = await stack.get("/clients")
    assert isinstance(listed, list)
    (mine,) = [c for c in listed if c["client_id"] == client]
    assert [c["key_prefix"] for c in mine["credentials"]] == [k["key_prefix"] for k in (first, second, third)]
    text = str(listed)
    assert all(k["key"] not in text for k in (first, second, third))


async def test_an_operator_changes_a_clients_limits_and_the_gateway_applies_them_at_once(
    stack: Stack,
) -> None:
    created = await stack.post("/clients", {"name": f"lim-{new_id()[:6]}", "scopes": ["rag.embedding@1"]})
    assert isinstance(created, dict)
    client = created["client_id"]
    view = await stack.post(f"/clients/{client}/limits", {"requests_per_minute": 1, "priority": 5})
    assert isinstance(view, dict)
    assert (view["requests_per_minute"], view["max_concurrency"], view["priority"]) == (1, 4, 5)
    # One request a minute: the second within the minute is refused (unless the first straddled
    # the minute's end: then the third is).
    statuses = [await status_with(stack, created["key"]) for _ in range(3)]
    assert 429 in statuses
    narrowed = await stack.post(f"/clients/{client}/limits", {"scopes": ["rag.reranking@1"]})
    assert isinstance(narrowed, dict)
    assert narrowed["scopes"] == ["rag.reranking@1"]
    assert await status_with(stack, created["key"]) == 403  # embeddings out of its scopes now


@pytest.mark.parametrize(
    ("path", "body", "status", "code"),
    [
        ("/clients/cl_nobody/limits", {"priority": 1}, 404, "CLIENT_NOT_FOUND"),
        ("/clients/{client}/disable", {"reason": "x" * 1001}, 422, "INVALID_INPUT"),
        ("/clients/{client}/limits", {"max_concurrency": 0}, 422, "INVALID_INPUT"),
        ("/clients/{client}/limits", {"max_concurrency": 10_001}, 422, "INVALID_INPUT"),
        ("/clients/{client}/limits", {"requests_per_minute": 10**12}, 422, "INVALID_INPUT"),
        ("/clients/{client}/limits", {"priority": -1}, 422, "INVALID_INPUT"),
        ("/clients/{client}/limits", {"scopes": []}, 422, "INVALID_INPUT"),
        ("/clients/{client}/limits", {"scopes": ["nope@1"]}, 404, "UNKNOWN_CAPABILITY"),
        ("/clients/cl_nobody/rotate", {}, 404, "CLIENT_NOT_FOUND"),
        ("/clients/cl_nobody/disable", {}, 404, "CLIENT_NOT_FOUND"),
        ("/clients/{client}/credentials/cred_nobody/revoke", {}, 404, "CREDENTIAL_NOT_FOUND"),
        ("/clients/{client}/rotate", {"grace_s": -1}, 422, "INVALID_INPUT"),
        ("/clients/{client}/rotate", {"expires_in_s": 0}, 422, "INVALID_INPUT"),
        (
            "/clients",
            {"name": "later", "scopes": ["rag.embedding@1"], "expires_in_s": -60},
            422,
            "INVALID_INPUT",
        ),
        (
            "/clients",
            {"name": "huge", "scopes": ["rag.embedding@1"], "expires_in_s": 1e12},
            422,
            "INVALID_INPUT",
        ),
    ],
)
async def test_client_admin_input_it_cannot_act_on_is_refused_and_records_nothing(
    stack: Stack, path: str, body: object, status: int, code: str
) -> None:
    created = await stack.post("/clients", {"name": f"kept-{new_id()[:6]}", "scopes": ["rag.embedding@1"]})
    assert isinstance(created, dict)
    head = await stack.events_head()
    response = await stack.admin.post(f"/admin/v1{path.format(client=created['client_id'])}", json=body)
    assert response.status_code == status, response.text
    assert response.json()["error"]["code"] == code
    assert await stack.events_head() == head, "a refusal must change nothing"


async def test_a_change_a_stalled_directory_has_not_applied_is_still_answered_from_the_log(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A gateway whose key directory stopped following the log (its feed stalled): the change is
    # recorded, so the answer must come, key included (it is shown once), saying it is not applied.
    monkeypatch.setattr(admin_clients, "APPLY_WAIT_S", 0.5)
    stalled = InProcessGateway()
    await stalled.start(stack.nats_url)
    assert stalled.replica is not None
    stalled.replica.edge.operator_token = TOKEN
    await stalled.replica.edge.directory.close()
    try:
        async with httpx.AsyncClient(
            base_url=f"{stalled.url}/admin/v1", headers={"authorization": f"Bearer {TOKEN}"}, timeout=60
        ) as admin:
            body = {"name": f"stalled-{new_id()[:6]}", "scopes": ["rag.embedding@1"]}
            created = await admin.post("/clients", json=body)
            assert created.status_code == 200, created.text
            assert created.json()["applied"] is False
            assert created.json()["key"].startswith("mf_")
            disabled = await admin.post(f"/clients/{created.json()['client_id']}/disable", json={})
            assert disabled.status_code == 200, disabled.text
            assert (disabled.json()["applied"], disabled.json()["enabled"]) == (False, False)
    finally:
        await stalled.stop()
    # The gateway that follows the log sees both.
    listed = await stack.get("/clients")
    assert isinstance(listed, list)
    (mine,) = [c for c in listed if c["client_id"] == created.json()["client_id"]]
    assert mine["enabled"] is False
