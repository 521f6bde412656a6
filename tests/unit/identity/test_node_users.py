"""The node users rendered into the server configuration from the recorded identities."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.identity.nats_users import (
    BEGIN,
    END,
    NodeIdentity,
    fold_identities,
    node_permissions,
    render_node_users,
    with_node_users,
)
from streams.events.identity import NodeCredentialsIssued, NodeCredentialsRevoked


def key(n: int) -> str:
    """A well-formed user public key (U + 55 base32 characters), distinct per `n`."""
    return "U" + base64.b32encode(n.to_bytes(35, "little")).decode()[:55]


CONFIG = f"""accounts {{
  A {{
    users: [
      {{ user: gateway, password: $GATEWAY_PASSWORD }}
      {BEGIN} (rendered)
      {END}
      {{ user: audit, password: $AUDIT_PASSWORD }}
    ]
  }}
}}
"""
A, B = NodeIdentity("node-a", key(1)), NodeIdentity("node-b", key(2))
node_ids = st.from_regex(r"[a-z][a-z0-9\-]{0,20}", fullmatch=True)


def test_each_recorded_node_gets_one_nkey_user_between_the_markers() -> None:
    rendered = with_node_users(CONFIG, {"node-b": B, "node-a": A})
    inside = rendered.split(BEGIN)[1].split(END)[0]
    assert inside.count("nkey:") == 2
    assert inside.index(A.public_key) < inside.index(B.public_key)  # by node id, whatever the order given
    assert rendered.split(BEGIN)[0] == CONFIG.split(BEGIN)[0]
    assert rendered.split(END)[1] == CONFIG.split(END)[1]


def test_rendering_again_without_a_revoked_node_leaves_only_the_others() -> None:
    once = with_node_users(CONFIG, {"node-a": A, "node-b": B})
    again = with_node_users(once, {"node-b": B})
    assert A.public_key not in again
    assert again == with_node_users(CONFIG, {"node-b": B})


def test_a_configuration_without_the_markers_is_refused() -> None:
    with pytest.raises(ValueError, match="BEGIN node users"):
        with_node_users("accounts { A { users: [] } }\n", {"node-a": A})


def test_a_malformed_public_key_is_refused() -> None:
    with pytest.raises(ValueError, match="not a NATS user public key"):
        render_node_users({"node-a": NodeIdentity("node-a", "SUAAAA")})


def test_the_last_key_issued_is_the_nodes_and_a_revoked_node_has_none() -> None:
    events = [
        NodeCredentialsIssued(node_id="node-a", public_key=key(1)),
        NodeCredentialsIssued(node_id="node-b", public_key=key(2)),
        NodeCredentialsIssued(node_id="node-a", public_key=key(3)),
        NodeCredentialsRevoked(node_id="node-b", public_key=key(2)),
    ]
    assert fold_identities(events) == {"node-a": NodeIdentity("node-a", key(3))}
    reissued = NodeCredentialsIssued(node_id="node-b", public_key=key(4))
    assert fold_identities([*events, reissued])["node-b"] == NodeIdentity("node-b", key(4))


def test_a_node_reads_its_own_invokes_and_inbox_alone() -> None:
    assert node_permissions(A)["subscribe"] == [
        "mf.invoke.node-a.*",
        "mf.alive.node-a",
        f"_INBOX.{A.public_key}.>",
    ]


def test_a_node_appends_only_its_registration_and_generations_to_its_node() -> None:
    on_node = [s for s in node_permissions(A)["publish"] if s.startswith("mf.evt.node.")]
    assert on_node == ["mf.evt.node.node-a.NodeRegistered", "mf.evt.node.node-a.WorkerStarted"]


def test_a_node_creates_only_its_own_job_consumer_filtered_to_its_own_jobs() -> None:
    consumers = [s for s in node_permissions(A)["publish"] if "CONSUMER" in s and "MF_WORK" in s]
    assert consumers == [
        "$JS.API.CONSUMER.CREATE.MF_WORK.agent-node-a.mf.job.node-a.>",
        "$JS.API.CONSUMER.DELETE.MF_WORK.agent-node-a",
        "$JS.API.CONSUMER.MSG.NEXT.MF_WORK.agent-node-a",
    ]


# What every node may publish alike: reads, the aggregates jobs name, replies to requesters.
SHARED = {
    "$JS.API.DIRECT.GET.MF_EVENTS",
    "$JS.API.STREAM.MSG.GET.MF_EVENTS",
    "mf.evt.artifactset.*.ArtifactSetRegistered",
    "mf.evt.artifactset.*.ArtifactSetVerified",
    "mf.evt.artifactset.*.ArtifactSetVerificationFailed",
    "mf.evt.artifactset.*.ArtifactSetFetchProgressed",
    "mf.evt.candidate.*.ProbeCompleted",
    "mf.evt.candidate.*.ProbeFailed",
    # the artifact bucket, which every node reads alike (an ordered consumer of its own each time)
    "$JS.API.STREAM.INFO.OBJ_MF_ARTIFACTS",
    "$JS.API.STREAM.MSG.GET.OBJ_MF_ARTIFACTS",
    "$JS.API.CONSUMER.CREATE.OBJ_MF_ARTIFACTS",
    "$JS.FC.OBJ_MF_ARTIFACTS.>",
    "_INBOX.>",
}


@given(st.lists(node_ids, min_size=2, max_size=2, unique=True))
def test_no_two_nodes_share_a_subject_of_their_own(nodes: list[str]) -> None:
    first, second = (node_permissions(NodeIdentity(n, key(i))) for i, n in enumerate(nodes))
    assert not (set(first["publish"]) & set(second["publish"])) - SHARED
    assert not set(first["subscribe"]) & set(second["subscribe"])
