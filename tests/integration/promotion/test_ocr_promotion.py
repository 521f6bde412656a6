"""An OCR model goes through the same pipeline as an embedding model, through the admin API only:
its candidate takes the artifact set's capability, and its profile may be empty (the contract
fixes what OCR outputs; only an embedding declares a space)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodeagent.models.ocr import pull_ppocr
from tests.integration.promotion.conftest import Stack, probed_candidate, production_approval

pytestmark = pytest.mark.timeout(300)


async def test_pp_ocr_is_imported_probed_approved_and_promoted_without_a_profile(
    stack: Stack, tmp_path: Path
) -> None:
    source = pull_ppocr(tmp_path / "pp-ocrv4", install_missing=False)
    probed = await probed_candidate(stack, source, "pp-ocrv4", {}, capability="document.ocr@1")
    assert probed["capability"] == "document.ocr@1"
    assert probed["status"] == "lab_ready", probed
    approval = await stack.post("/approvals/production", production_approval(probed["candidate_id"]))
    assert isinstance(approval, dict)
    deployment = await stack.post(
        "/deployments", {"candidate_id": probed["candidate_id"], "approval_id": approval["approval_id"]}
    )
    assert isinstance(deployment, dict)
    assert (deployment["capability"], deployment["channel"]) == ("document.ocr@1", "stable")
