"""A published contract never changes: each version's definition (schemas, limits) is the one
already registered on running systems, whose gateways would otherwise refuse to start
(`gateway.contracts.ContractChanged`). A change is a new version, added here with its digest."""

from __future__ import annotations

import pytest

from gateway.contracts import registration
from streams.contracts import CONTRACTS

PUBLISHED = {
    "rag.embedding@1": "0be6e7a339db1c7d1fb18bb40298feaa502356b87886123f84cfcd99054be498",
    "rag.reranking@1": "18363b12f642b3b4336b5b6a9224592ee1da5434227511efe5feff775fc1c8fd",
    "document.ocr@1": "a2f81dba1956ee7ece5934e47a51210011ffe3d22ec073e5b576fe4f0247bdd9",
    "vision.embedding@1": "f91cb463c6d0cb89fc616b68d080bf1286cbe02f9cefd0eb11a321bea42bb95c",
    "speech.transcription@1": "b0e70f5afd96a3b0e146e0573f9a9b3c6878353ba61b9ba6cb38f59027a9d5f6",
}


@pytest.mark.parametrize("capability", sorted(CONTRACTS))
def test_a_published_contract_keeps_the_definition_it_was_registered_with(capability: str) -> None:
    assert registration(CONTRACTS[capability]).definition_sha256 == PUBLISHED[capability]
