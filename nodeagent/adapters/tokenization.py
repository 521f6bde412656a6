"""tokenizer.json (HF `tokenizers`) → padded int64 arrays for BERT-style encoders."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray
from tokenizers import Tokenizer

from streams import codes
from streams.codes import ServingError

TextOrPair = str | tuple[str, str]


@dataclass(frozen=True)
class EncodedBatch:
    input_ids: NDArray[np.int64]
    attention_mask: NDArray[np.int64]
    token_type_ids: NDArray[np.int64]

    @property
    def token_counts(self) -> tuple[int, ...]:
        return tuple(int(count) for count in self.attention_mask.sum(axis=1))

    def feeds(self) -> dict[str, NDArray[np.int64]]:
        # Runtimes take the inputs their model declares and ignore the rest (e.g. token_type_ids).
        return {
            "input_ids": self.input_ids,
            "attention_mask": self.attention_mask,
            "token_type_ids": self.token_type_ids,
        }


class TextEncoder:
    """Truncates to `max_length` and pads to the longest row of each batch (not to a fixed size)."""

    def __init__(self, tokenizer_path: Path, max_length: int) -> None:
        if max_length < 2:
            raise ValueError("max_length must leave room for special tokens")
        self.max_length = max_length
        self._tokenizer = Tokenizer.from_file(str(tokenizer_path))
        # tokenizer.json files often carry a fixed padding length; batches pad to their longest row.
        padding = self._tokenizer.padding or {}
        self._tokenizer.no_padding()
        self._tokenizer.enable_truncation(max_length=max_length)
        self._pad_id = int(padding.get("pad_id", 0))
        self._pad_type_id = int(padding.get("pad_type_id", 0))

    def count_tokens(self, item: TextOrPair) -> int:
        return len(self._encode([item])[0].ids)

    def encode(self, items: Sequence[TextOrPair]) -> EncodedBatch:
        if not items:
            raise ServingError(codes.INVALID_INPUT.code, "a batch needs at least one row")
        encodings = self._encode(items)
        width = max(len(encoding.ids) for encoding in encodings)
        input_ids = np.full((len(encodings), width), self._pad_id, dtype=np.int64)
        type_ids = np.full((len(encodings), width), self._pad_type_id, dtype=np.int64)
        mask = np.zeros((len(encodings), width), dtype=np.int64)
        for row, encoding in enumerate(encodings):
            length = len(encoding.ids)
            input_ids[row, :length] = encoding.ids
            type_ids[row, :length] = encoding.type_ids
            mask[row, :length] = 1
        return EncodedBatch(input_ids, mask, type_ids)

    def _encode(self, items: Sequence[TextOrPair]) -> list[Any]:
        for item in items:
            if not isinstance(item, str | tuple):
                raise ServingError(
                    codes.INVALID_INPUT.code, f"rows must be text or (query, document), got {type(item)}"
                )
        return list(self._tokenizer.encode_batch(list(items)))
