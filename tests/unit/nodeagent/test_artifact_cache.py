"""A cached copy the disk no longer holds as fetched is not loaded: it is forgotten or dropped and
fetched again (here with no bucket to fetch from, so the fetch's refusal shows it was tried)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from artifacts import ArtifactManifest, build_manifest
from nodeagent.agent.artifact_cache import CACHE_FOLDER, ArtifactCache
from streams.codes import ServingError

SET = "as-cached"


def cached_set(root: Path) -> tuple[Path, ArtifactManifest]:
    folder = root / CACHE_FOLDER / SET
    folder.mkdir(parents=True)
    (folder / "config.json").write_text('{"hidden_size": 4}')
    return folder, build_manifest(folder)


def refusal(cache: ArtifactCache, manifest: ArtifactManifest) -> str:
    with pytest.raises(ServingError) as refused:
        asyncio.run(cache.verified(SET, "not-here", manifest, frozenset()))
    return refused.value.code


def test_a_cached_set_that_verifies_is_used_as_it_is(tmp_path: Path) -> None:
    folder, manifest = cached_set(tmp_path)
    cache = ArtifactCache(tmp_path, None, 1 << 20)
    assert asyncio.run(cache.verified(SET, "not-here", manifest, frozenset())).root == folder
    assert cache.held_set_ids() == [SET]


def test_a_cached_file_changed_on_disk_drops_the_set_to_fetch_it_again(tmp_path: Path) -> None:
    folder, manifest = cached_set(tmp_path)
    cache = ArtifactCache(tmp_path, None, 1 << 20)
    (folder / "config.json").write_text('{"hidden_size": 5}')
    assert refusal(cache, manifest) == "ARTIFACT_FETCH_FAILED"
    assert not folder.exists()
    assert cache.held_set_ids() == []


def test_a_link_planted_in_a_cached_set_drops_it_to_fetch_it_again(tmp_path: Path) -> None:
    folder, manifest = cached_set(tmp_path)
    cache = ArtifactCache(tmp_path, None, 1 << 20)
    (folder / "config.json").unlink()
    (folder / "config.json").symlink_to("/etc/hostname")
    assert refusal(cache, manifest) == "ARTIFACT_FETCH_FAILED"
    assert not folder.exists()


def test_a_cached_set_removed_by_hand_is_forgotten_and_fetched_again(tmp_path: Path) -> None:
    folder, manifest = cached_set(tmp_path)
    cache = ArtifactCache(tmp_path, None, 1 << 20)
    (folder / "config.json").unlink()
    folder.rmdir()
    assert refusal(cache, manifest) == "ARTIFACT_FETCH_FAILED"
    assert cache.held_set_ids() == []


def test_an_unfinished_fetch_left_by_a_stopped_agent_is_cleared_at_start(tmp_path: Path) -> None:
    unfinished = tmp_path / CACHE_FOLDER / f".fetch-{SET}-0123abcd"
    unfinished.mkdir(parents=True)
    (unfinished / "model.onnx").write_bytes(b"\x08half")
    assert ArtifactCache(tmp_path, None, 1 << 20).held_set_ids() == []
    assert not unfinished.exists()
