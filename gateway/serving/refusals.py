"""Placement refusals and queueings on the record, without flooding it: identical ones (same
accelerator, deployment, verdict, first reason, dry run or not) within a window are counted into
one `PlacementRejected`. A storm of a thousand refusals a second is then one event a second. Dry
runs that would admit (`PlacementDryRun`) are counted the same way.

Pure accumulation on the caller's clock; `gateway.serving.refusal_log` notes and flushes them.
"""

from __future__ import annotations

import msgspec

from streams.events import serving as s

WINDOW_S = 1.0  # how long identical refusals are counted together before their event is written

Noted = s.PlacementRejected | s.PlacementDryRun
_Key = tuple[type, str, str, str, str, bool]


class _Window(msgspec.Struct):
    first: Noted
    opened: float  # the clock's reading at the first refusal
    count: int = 1


def _key(refusal: Noted) -> _Key:
    first_reason = refusal.reason_codes[0] if refusal.reason_codes else ""
    dry_run = isinstance(refusal, s.PlacementDryRun) or refusal.dry_run
    kind = type(refusal)
    return (kind, refusal.accelerator_id, refusal.deployment_id, refusal.verdict, first_reason, dry_run)


class RefusalTally:
    """The open windows of this replica, one per kind of refusal."""

    def __init__(self, window_s: float = WINDOW_S) -> None:
        self.window_s = window_s
        self.open: dict[_Key, _Window] = {}

    def add(self, refusal: Noted, now: float) -> list[Noted]:
        """Count `refusal` in its window, opening one if none is open; returns the windows that
        had closed by `now` (a late timer does not stretch a window), ready to be written."""
        closed = self.due(now)
        window = self.open.get(_key(refusal))
        if window is None:
            self.open[_key(refusal)] = _Window(refusal, now)
        else:
            window.count += 1
        return closed

    def due(self, now: float) -> list[Noted]:
        """The windows closed by `now`, taken out, as one event each."""
        ended = [key for key, window in self.open.items() if window.opened + self.window_s <= now]
        return [self._event(self.open.pop(key)) for key in ended]

    def drain(self) -> list[Noted]:
        """Every open window, closed now (the gateway settles or closes)."""
        windows, self.open = list(self.open.values()), {}
        return [self._event(window) for window in windows]

    def next_close(self) -> float | None:
        """When the oldest open window closes, on the caller's clock; None when none is open."""
        opened = min((w.opened for w in self.open.values()), default=None)
        return None if opened is None else opened + self.window_s

    def _event(self, window: _Window) -> Noted:
        return msgspec.structs.replace(window.first, count=window.count, window_s=self.window_s)
