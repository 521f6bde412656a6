"""Admin input the gateway cannot act on is refused INVALID_INPUT (422), naming the field, and
changes nothing; the scheduler policy is revised only into a policy it can run under."""

from __future__ import annotations

import asyncio

import pytest

from gateway.admin.client import TOKEN_ENV, URL_ENV
from modelforge.cli import main
from tests.integration.promotion.conftest import TOKEN, Stack

pytestmark = pytest.mark.timeout(300)


async def refused_input(stack: Stack, method: str, path: str, body: object, field: str) -> None:
    head = await stack.events_head()
    response = await stack.admin.request(method, f"/admin/v1{path}", json=body)
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert (error["code"], error["param"]) == ("INVALID_INPUT", field), error
    assert await stack.events_head() == head, "a refusal must change nothing"


@pytest.mark.parametrize("expires_in_s", [1e12, 0, -60])
async def test_a_lab_approval_lasts_more_than_nothing_and_at_most_a_year(
    stack: Stack, expires_in_s: float
) -> None:
    body = {"candidate_id": "cand-any", "node_ids": [stack.node], "expires_in_s": expires_in_s}
    await refused_input(stack, "POST", "/approvals/lab", body, "expires_in_s")


@pytest.mark.parametrize("path", ["/requests", "/scheduler/placements"])
@pytest.mark.parametrize("limit", ["abc", "0", "1001", "-5"])
async def test_a_history_limit_is_a_whole_number_from_1_to_1000(stack: Stack, path: str, limit: str) -> None:
    await refused_input(stack, "GET", f"{path}?limit={limit}", None, "limit")


@pytest.mark.parametrize(
    ("settings", "field"),
    [
        ({"safety_reserve_min_bytes": -(1 << 30)}, "safety_reserve_min_bytes"),
        ({"safety_reserve_fraction": 1.5}, "safety_reserve_fraction"),
        ({"pressure_critical_at": 0.5}, "pressure_critical_at"),
        ({"global_queue_limit": 0}, "global_queue_limit"),
        ({"load_timeout_seconds": 0}, "load_timeout_seconds"),
        ({"cold_load_requires_known_attribution": 0}, "cold_load_requires_known_attribution"),
    ],
)
async def test_a_policy_the_scheduler_cannot_run_under_is_refused(
    stack: Stack, settings: dict[str, object], field: str
) -> None:
    await refused_input(stack, "POST", "/scheduler/policy", {"settings": settings}, field)


async def test_the_attribution_switch_is_revised_through_the_api(stack: Stack) -> None:
    switch = "cold_load_requires_known_attribution"
    revised = await stack.post("/scheduler/policy", {"settings": {switch: False}})
    assert isinstance(revised, dict)
    assert revised["policy"][switch] is False
    revised = await stack.post("/scheduler/policy", {"settings": {switch: True}})
    assert isinstance(revised, dict)
    assert revised["policy"][switch] is True


async def test_the_cli_sets_a_switch_and_explains_a_value_it_cannot_read(
    stack: Stack, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(URL_ENV, stack.gateway.url)
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    policy = ["scheduler", "policy", "--set"]
    # The CLI's client is synchronous: off this loop, which serves the gateway.
    assert await asyncio.to_thread(main, [*policy, "cold_load_requires_known_attribution=false"]) == 0
    assert '"cold_load_requires_known_attribution": false' in capsys.readouterr().out
    with pytest.raises(SystemExit) as unreadable:
        await asyncio.to_thread(main, [*policy, "global_queue_limit=lots"])
    assert "global_queue_limit" in str(unreadable.value.code)
    assert await asyncio.to_thread(main, [*policy, "safety_reserve_min_bytes=-1"]) == 1
    assert "INVALID_INPUT" in capsys.readouterr().err
    assert await asyncio.to_thread(main, [*policy, "cold_load_requires_known_attribution=true"]) == 0


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/projects", {"name": "tea\x00m"}, "name"),
        ("/projects", {"name": "\x1b[2Jteam"}, "name"),
        ("/projects", {"name": "team", "owner": "o" * 257}, "owner"),
        ("/clients/cl_anyone/disable", {"reason": "leaked\x00"}, "reason"),
        ("/clients/cl_anyone/credentials/cred_any/revoke", {"reason": "\x07"}, "reason"),
        ("/deployments/dep-any/drain", {"reason": "a\x00b"}, "reason"),
        ("/candidates", {"candidate_id": "c", "artifact_set_id": "a", "deployment_config": {"k": "\x00"}},
         "deployment_config"),
        ("/approvals/production", {"candidate_id": "c", "supply_chain_review": "ok\n\x00"},
         "supply_chain_review"),
        ("/projects/pr-any/fit", {"deployment_id": "d", "evidence_class": "X", "recommendation": "Y",
                                  "production_validation": "Z", "case_count": 1, "notes": "\x00"}, "notes"),
        ("/clients/cl%00x/disable", {}, "client_id"),
    ],
)  # fmt: skip
async def test_text_with_a_control_character_or_past_its_length_is_refused_naming_the_field(
    stack: Stack, path: str, body: object, field: str
) -> None:
    # Recorded, a NUL would halt the projector on that event for good (events are immutable).
    await refused_input(stack, "POST", path, body, field)
