"""Small real models the agent can serve without a model hub."""

from nodeagent.models.pull import pull_minilm

__all__ = ["pull_minilm"]
