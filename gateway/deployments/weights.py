"""A capability's traffic split between its stable deployment and experiments (canary releases):
checking a split an operator asks for, and choosing the deployment one request goes to. Pure.

The choice hashes a key into one of 100 buckets; each deployment owns a run of buckets as wide as
its weight, experiments first (by id) and the stable deployment last. The key is the request's id,
or the client's id when the split is sticky: the same client then lands on the same deployment
while the weights stand, and a canary ramped from 10 to 20 keeps the clients it had (its run only
grows). Deterministic: the same keys and weights give the same choices on every replica and on
replay.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Iterable, Mapping

import msgspec

from gateway.deployments.model import DeploymentState
from streams.codes import ServingError

BUCKETS = 100  # weights are percents


class RoutingKey(msgspec.Struct, frozen=True):
    """Who asks and which request: what a weighted split hashes."""

    client_id: str
    request_id: str

    def for_split(self, sticky: bool) -> str:
        return self.client_id if sticky else self.request_id


def bucket_of(capability: str, key: str) -> int:
    """The key's bucket, 0..99 (the capability salts it: one client's buckets differ per capability)."""
    digest = hashlib.sha256(f"{capability}\x00{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % BUCKETS


def split_order(weights: Mapping[str, int], stable_id: str) -> list[str]:
    """The order the deployments' bucket runs are laid in: experiments by id, the stable one last."""
    return sorted(d for d in weights if d != stable_id) + ([stable_id] if stable_id in weights else [])


def choose(weights: Mapping[str, int], stable_id: str, bucket: int) -> str:
    """The deployment whose run of buckets holds `bucket`; the stable one where none does."""
    edge = 0
    for deployment_id in split_order(weights, stable_id):
        edge += weights[deployment_id]
        if bucket < edge:
            return deployment_id
    return stable_id


def check_weights(
    stable: DeploymentState,
    weights: Mapping[str, object],
    deployments: Iterable[DeploymentState],
    approved: Collection[str],
) -> dict[str, int]:
    """The split as it may be recorded, or ROUTING_WEIGHTS_INVALID (the numbers) or
    ROUTING_TARGET_INVALID (what they name): whole percents 0..100 summing to 100, naming the
    capability's stable deployment and experiments of the same capability that are active and not
    draining, whose candidate holds a usable production approval (`approved`: candidate ids; a
    share of the capability's traffic is production traffic) and which share the stable one's
    embedding space (vectors from two spaces in one index would be silently wrong). One with
    weight 0 takes nothing and needs neither activity nor approval."""
    checked: dict[str, int] = {}
    for deployment_id, weight in weights.items():
        if isinstance(weight, bool) or not isinstance(weight, int) or not 0 <= weight <= BUCKETS:
            raise ServingError(
                "ROUTING_WEIGHTS_INVALID",
                f"the weight of {deployment_id!r} must be a whole percent 0..100, not {weight!r}",
                "weights",
            )
        checked[deployment_id] = weight
    if sum(checked.values()) != BUCKETS:
        raise ServingError(
            "ROUTING_WEIGHTS_INVALID",
            f"the weights must sum to 100, not {sum(checked.values())}",
            "weights",
            details={"sum": sum(checked.values())},
        )
    known = {d.deployment_id: d for d in deployments}
    for deployment_id, weight in checked.items():
        if deployment_id != stable.deployment_id:
            _check_experiment(stable, known.get(deployment_id), deployment_id, weight, approved)
    return checked


def _check_experiment(
    stable: DeploymentState,
    target: DeploymentState | None,
    target_id: str,
    weight: int,
    approved: Collection[str],
) -> None:
    def refuse(why: str) -> ServingError:
        return ServingError(
            "ROUTING_TARGET_INVALID", f"{target_id!r} {why}", "weights", details={"deployment_id": target_id}
        )

    if target is None or target.capability != stable.capability:
        raise refuse(f"is no deployment of {stable.capability}")
    if target.channel != "experiment":
        raise refuse(
            f"is not an experiment of {stable.capability} (its stable deployment is {stable.deployment_id})"
        )
    if target.embedding_space != stable.embedding_space:
        raise refuse(f"embeds in another space than {stable.deployment_id}: its vectors are not comparable")
    if weight and (target.draining or not target.active):
        raise refuse("is not active (or is draining): it can take no traffic")
    if weight and target.candidate_id not in approved:
        raise refuse(
            f"has no usable production approval for its candidate {target.candidate_id}: a share of "
            f"{stable.capability}'s traffic is production traffic (approvals production, then try again)"
        )
