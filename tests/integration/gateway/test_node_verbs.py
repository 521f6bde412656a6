"""`modelforge nodes …` against a real gateway and agent, run as a process as an operator runs it:
list and show the node, cordon and uncordon it, and drain it: an idle resident copy is unloaded,
one whose request still runs is reported busy (exit 3) and unloaded by the next drain. And the
admin `list` verbs print the gateway's real rows as tables."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from gateway.operations.node_drain import NodeDrain
from tests.integration.gateway.conftest import Stack
from tests.integration.gateway.residents import lease_elsewhere, make_resident, release_lease, serving_ctx
from tests.support.answers import conforms

pytestmark = pytest.mark.timeout(300)
TOKEN = "operator-token-for-node-verbs"


class Run:
    def __init__(self, status: int, stdout: str, stderr: str) -> None:
        self.status, self.stdout, self.stderr = status, stdout, stderr


@pytest.fixture
async def operated(stack: Stack) -> AsyncIterator[Stack]:
    """The stack's gateway taking the test's operator token; the node uncordoned after each test."""
    assert stack.gateway.replica is not None
    stack.gateway.replica.edge.operator_token = TOKEN
    yield stack
    async with httpx.AsyncClient(base_url=stack.gateway.url, timeout=60) as http:
        response = await http.post(
            f"/admin/v1/nodes/{stack.node}",
            json={"enabled": True},
            headers={"authorization": f"Bearer {TOKEN}"},
        )
    assert response.status_code == 200, response.text


async def modelforge(stack: Stack, scratch: Path, *args: str) -> Run:
    """`modelforge ARGS` as its own process (the in-process gateway answers it meanwhile)."""
    env = {
        **os.environ,
        "MODELFORGE_GATEWAY_URL": stack.gateway.url,
        "MODELFORGE_OPERATOR_TOKEN": TOKEN,
        "MODELFORGE_HOME": str(scratch / "no-embedded-stack"),
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "modelforge.cli", *args,
        env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await process.communicate()
    assert process.returncode is not None
    return Run(process.returncode, out.decode(), err.decode())


async def nodes(stack: Stack, scratch: Path, *args: str) -> Run:
    return await modelforge(stack, scratch, "nodes", *args)


async def test_nodes_list_is_a_table_of_the_nodes_and_json_on_request(operated: Stack, scratch: Path) -> None:
    table = await nodes(operated, scratch, "list")
    assert table.status == 0, table.stderr
    header, _, *rows = table.stdout.splitlines()
    assert header.split()[:3] == ["NODE", "STATE", "ONLINE"]
    (row,) = [r for r in rows if r.startswith(operated.node)]
    assert row.split()[1:3] == ["enabled", "yes"]
    listed = await nodes(operated, scratch, "list", "--json")
    assert listed.status == 0, listed.stderr
    (mine,) = [n for n in json.loads(listed.stdout) if n["node_id"] == operated.node]
    assert (mine["enabled"], mine["online"]) == (True, True)


async def test_a_cordoned_node_shows_cordoned_and_uncordon_enables_it_again(
    operated: Stack, scratch: Path
) -> None:
    cordoned = await nodes(operated, scratch, "cordon", operated.node, "--reason", "kernel update")
    assert cordoned.status == 0, cordoned.stderr
    assert f"node {operated.node} cordoned (now cordoned)" in cordoned.stdout
    shown = await nodes(operated, scratch, "show", operated.node, "--json")
    assert json.loads(shown.stdout)["enabled"] is False
    uncordoned = await nodes(operated, scratch, "uncordon", operated.node)
    assert uncordoned.status == 0, uncordoned.stderr
    assert "(now enabled)" in uncordoned.stdout


async def test_an_unknown_node_is_refused_with_its_code(operated: Stack, scratch: Path) -> None:
    refused = await nodes(operated, scratch, "drain", "node-nobody")
    assert refused.status == 1
    assert "NO_ELIGIBLE_NODE (404)" in refused.stderr


async def test_a_drain_cordons_the_node_and_unloads_an_idle_resident(operated: Stack, scratch: Path) -> None:
    accelerator = await make_resident(operated)
    drained = await nodes(operated, scratch, "drain", operated.node, "--reason", "maintenance")
    assert drained.status == 0, drained.stderr
    assert f"unloaded  {operated.deployment_id} on {accelerator}" in drained.stdout
    assert "cordoned and drained" in drained.stdout
    live = serving_ctx(operated).live
    assert not any(
        r.deployment_id == operated.deployment_id for r in live.accelerators[accelerator].residents
    )
    assert live.catalog.nodes[operated.node].enabled is False


async def test_a_drain_reports_a_copy_whose_request_runs_busy_and_the_next_drain_unloads_it(
    operated: Stack, scratch: Path
) -> None:
    accelerator = await make_resident(operated)
    lease, granting = lease_elsewhere(operated, accelerator)
    await granting
    live = serving_ctx(operated).live
    leases = lambda: {held.lease_id for held in live.accelerators[accelerator].leases}  # noqa: E731
    assert await live.wait_for(lambda: lease.lease_id in leases(), 10)
    busy = await nodes(operated, scratch, "drain", operated.node, "--json")
    assert busy.status == 3, busy.stderr
    report = json.loads(busy.stdout)
    conforms(report, NodeDrain)  # what the OpenAPI document says the drain answers
    assert report["unloaded"] == []
    assert [(c["deployment_id"], c["code"], c["active_requests"]) for c in report["busy"]] == [
        (operated.deployment_id, "DEPLOYMENT_BUSY", 1)
    ]
    await release_lease(operated, lease)
    again = await nodes(operated, scratch, "drain", operated.node)
    assert again.status == 0, again.stderr
    assert f"unloaded  {operated.deployment_id} on {accelerator}" in again.stdout


async def test_a_drain_with_a_wait_out_of_range_is_refused_and_leaves_the_node_enabled(
    operated: Stack, scratch: Path
) -> None:
    refused = await nodes(operated, scratch, "drain", operated.node, "--wait-s", "3601")
    assert refused.status == 1
    assert "INVALID_INPUT (422)" in refused.stderr
    assert serving_ctx(operated).live.catalog.nodes[operated.node].enabled is True


@pytest.mark.parametrize(
    ("resource", "heading", "cell"),
    [
        ("deployments", "MODEL", "stable"),
        ("artifacts", "NAME", "MiB"),  # this stack registers its set without candidates or approvals
        ("projects", "", "(none)"),
    ],
)
async def test_a_list_verb_prints_the_gateways_rows_as_a_table(
    operated: Stack, scratch: Path, resource: str, heading: str, cell: str
) -> None:
    listed = await modelforge(operated, scratch, resource, "list")
    assert listed.status == 0, listed.stderr
    assert listed.stdout.startswith(heading)
    assert cell in listed.stdout
