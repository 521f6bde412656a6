"""The environment variables that name a node agent's identity and model folder: read by the agent
and `models pull`, set by the embedded stack for its node, and by the gateway's `artifacts import`
for where a node's sets live."""

from __future__ import annotations

NODE_ID_ENV = "MODELFORGE_NODE_ID"
ARTIFACT_ROOT_ENV = "MODELFORGE_ARTIFACT_ROOT"
