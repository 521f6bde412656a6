"""A one-line progress bar on stderr: done/total, events/s and ETA, redrawn at most 5 times a second."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    def __init__(self, total: int, label: str, enabled: bool = True, out: TextIO | None = None) -> None:
        self.total, self.label, self.enabled = max(total, 0), label, enabled
        self.out = out or sys.stderr
        self.done = 0
        self.started = time.perf_counter()
        self._drawn = 0.0

    def update(self, count: int) -> None:
        self.done += count
        now = time.perf_counter()
        if self.enabled and now - self._drawn >= 0.2:
            self._drawn = now
            self._draw(now)

    def _draw(self, now: float, end: str = "\r") -> None:
        elapsed = max(now - self.started, 1e-9)
        rate = self.done / elapsed
        share = self.done / self.total if self.total else 1.0
        filled = int(30 * min(share, 1.0))
        eta = (self.total - self.done) / rate if rate > 0 and self.total > self.done else 0.0
        self.out.write(
            f"{self.label} [{'#' * filled}{'.' * (30 - filled)}] {self.done}/{self.total}"
            f" {rate:,.0f} ev/s ETA {eta:,.0f}s   {end}"
        )
        self.out.flush()

    def close(self) -> None:
        if self.enabled:
            self._draw(time.perf_counter(), end="\n")
