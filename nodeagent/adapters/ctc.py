"""Greedy CTC decoding, shared by OCR line recognition and speech transcription.

A CTC model emits one distribution over (blank + vocabulary) per time step; the greedy path takes
the best class at each step, merges runs of the same class and drops blanks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray


@dataclass(frozen=True)
class CtcToken:
    index: int  # class index (never the blank)
    first_step: int  # time steps [first_step, last_step] the run covers
    last_step: int
    score: float  # the best step's value in the run (a probability when the model emits softmax)


def greedy_ctc(scores: NDArray[Any], *, blank: int = 0, steps: int | None = None) -> list[CtcToken]:
    """Collapse the per-step argmax of `scores` [time, classes] into tokens.

    `steps` cuts off padding at the end of a batched row.
    """
    usable = scores[: scores.shape[0] if steps is None else steps]
    if usable.shape[0] == 0:
        return []
    best = np.argmax(usable, axis=1)
    best_score = usable[np.arange(usable.shape[0]), best]
    # A run starts wherever the class changes; each run becomes one token unless it is blank.
    starts = np.flatnonzero(np.concatenate(([True], best[1:] != best[:-1])))
    ends = np.concatenate((starts[1:], [best.shape[0]])) - 1
    tokens: list[CtcToken] = []
    for start, end in zip(starts.tolist(), ends.tolist(), strict=True):
        index = int(best[start])
        if index == blank:
            continue
        tokens.append(CtcToken(index, start, end, float(np.max(best_score[start : end + 1]))))
    return tokens


def tokens_to_text(tokens: Sequence[CtcToken], vocabulary: Sequence[str]) -> str:
    return "".join(vocabulary[token.index] for token in tokens if 0 <= token.index < len(vocabulary))
