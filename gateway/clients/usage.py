"""When to record that a client's key was used (`ClientKeyUsed`), so the read model's
`last_used_at` of clients and credentials stays within a minute of the truth without a write per
request: at most once per `interval_s` per credential on this replica (per credential rather than
per client, so a rotation's old key shows whether it is still in use). Pure, on the caller's clock.
"""

from __future__ import annotations

USAGE_INTERVAL_S = 60.0


class UsageMarks:
    """The last time this replica recorded each credential's use."""

    def __init__(self, interval_s: float = USAGE_INTERVAL_S) -> None:
        self.interval_s = interval_s
        self._recorded: dict[str, float] = {}  # credential id -> clock reading

    def due(self, credential_id: str, now: float) -> bool:
        """Whether a use of `credential_id` now is to be recorded (and, if so, it counts as recorded)."""
        last = self._recorded.get(credential_id)
        if last is not None and now - last < self.interval_s:
            return False
        self._recorded[credential_id] = now
        return True
