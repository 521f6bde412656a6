"""The names a client puts in `model`: experiment routes and stable model names share them.

Serving resolves a client's `model` to an active experiment with that route before the stable
deployment (`gateway.state.catalog.Catalog.resolve`), so an experiment routed under a stable
model's name, or under a capability's name, would take production traffic without a production
approval. Both sides are refused here: a route that is not a plain name or is taken by a stable
deployment or a capability, and a promotion whose model name is an experiment's route. Pure.
A log written before these rules may hold such an experiment: `names_stable` is how serving lets
the stable deployment win for those names.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from gateway.deployments.model import DeploymentState
from streams.codes import ServingError
from streams.contracts import CONTRACTS

ROUTE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def capability_names() -> frozenset[str]:
    """`rag.embedding@1` and `rag.embedding`: what a client may name a capability by."""
    return _CAPABILITY_NAMES


def names_of(capability: str) -> tuple[str, str]:
    """What a client may name one capability by: `rag.embedding@1` and `rag.embedding`."""
    return capability, capability.partition("@")[0]


_CAPABILITY_NAMES = frozenset(name for capability in CONTRACTS for name in names_of(capability))


def check_route(route: str, deployments: Iterable[DeploymentState]) -> None:
    """Refuse a new experiment route that is not a plain name, or that names a capability or a
    stable deployment's model (not drained: a drained one takes no traffic)."""
    if not ROUTE.match(route):
        raise ServingError(
            "INVALID_INPUT",
            f"route {route!r} is not a plain name: 1-128 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit",
            "route",
        )
    if route in capability_names():
        raise ServingError("EXPERIMENT_NOT_ROUTABLE", f"route {route!r} names a capability", "route")
    stable = next((d for d in deployments if serves_stable_as(d, route)), None)
    if stable is not None:
        raise ServingError(
            "EXPERIMENT_NOT_ROUTABLE",
            f"route {route!r} is the model name of stable deployment {stable.deployment_id}",
            "route",
            details={"deployment_id": stable.deployment_id},
        )


def names_stable(name: str, deployments: Iterable[DeploymentState]) -> bool:
    """Whether a client's `model` names a capability or a stable deployment's model: names no
    experiment may be reached by, whatever an older log routed under them."""
    return name in capability_names() or any(serves_stable_as(d, name) for d in deployments)


def check_model_name(model_name: str, deployments: Iterable[DeploymentState]) -> None:
    """Refuse a stable promotion under a name an experiment is routed by (active or not: an
    inactive one can be activated again; a drained one cannot)."""
    experiment = next(
        (d for d in deployments if d.channel == "experiment" and not d.drained and d.route == model_name),
        None,
    )
    if experiment is not None:
        raise ServingError(
            "STATE_CONFLICT",
            f"model name {model_name!r} is the route of experiment {experiment.deployment_id}: "
            "drain the experiment or promote under another model_name",
            details={"deployment_id": experiment.deployment_id, "route": model_name},
        )


def serves_stable_as(deployment: DeploymentState, name: str) -> bool:
    """Whether `name` is the model name of this stable deployment (not drained)."""
    return deployment.channel == "stable" and not deployment.drained and deployment.model_name == name
