"""`ProjectChannels`: each project's channel per capability, and the rule a project-bound client
is held to. Pure.

A client bound to a project (`ClientCreated.project_id` or `ClientBoundToProject`, the later one
wins) may call only the capabilities its project is bound to, whatever else its scopes allow
(the seed's 403 PROJECT_CAPABILITY_NOT_BOUND), and is served by its project's channel: "stable"
is the stable deployment, any other channel the experiment with that route (when it is routable;
`Catalog.resolve` falls back to the stable deployment otherwise).
"""

from __future__ import annotations

from collections.abc import Mapping

from streams.codes import ServingError
from streams.events.control import ProjectBoundToChannel

STABLE = "stable"


class ProjectChannels:
    def __init__(self) -> None:
        self._channels: dict[str, dict[str, str]] = {}  # project id -> capability -> channel

    def bind(self, event: ProjectBoundToChannel) -> None:
        self._channels.setdefault(event.project_id, {})[event.capability] = event.channel

    def of(self, project_id: str) -> Mapping[str, str]:
        """The project's channel per capability (empty for a project bound to none)."""
        return self._channels.get(project_id, {})

    def check(self, project_id: str | None, capability: str) -> None:
        """PROJECT_CAPABILITY_NOT_BOUND (403) when the client's project has no channel for it."""
        if project_id is not None and capability not in self.of(project_id):
            raise ServingError(
                "PROJECT_CAPABILITY_NOT_BOUND",
                f"this client's project {project_id} is not bound to {capability}",
                "model",
                http_status=403,
            )

    def route(self, project_id: str | None, capability: str, requested: str) -> str:
        """The model name to resolve the call by: the client's own (`requested`) without a
        project, else its project's channel ("" for the stable deployment)."""
        if project_id is None:
            return requested
        channel = self.of(project_id).get(capability, STABLE)
        return "" if channel == STABLE else channel
