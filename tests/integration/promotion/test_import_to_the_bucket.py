"""`artifacts import` without an artifact root stores the set in the artifact bucket only: the
node's agent, whose root never had the files, fetches them into its cache to verify them."""

from __future__ import annotations

from pathlib import Path

from nodeagent.agent.artifact_cache import CACHE_FOLDER
from tests.integration.promotion.conftest import Stack


def names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


async def test_an_imported_set_is_verified_by_a_node_that_fetched_it_from_the_bucket(
    stack: Stack, minilm_source: Path
) -> None:
    body = {"source": str(minilm_source), "name": "bucket-only", "node_id": stack.node}
    imported = await stack.post("/artifact-sets/import", body)
    assert isinstance(imported, dict)
    assert imported["status"] == "verified", imported
    assert not (stack.artifact_root / "bucket-only").exists()
    fetched = stack.artifact_root / CACHE_FOLDER / imported["artifact_set_id"]
    assert names(fetched) == names(minilm_source)
