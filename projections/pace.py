"""When the projector's next commit may start: an interval that lengthens as traffic falls.

A transaction costs far more than an event in it (one stream's transaction of one event: ~1.3 ms of
projector and ~1.0 ms of PostgreSQL CPU; each event more, ~0.03 ms of each), so at a trickle the
transactions, not the events, were the cost of a request. The interval between commit starts is
`base` (the commit interval, 1 s by default) while a transaction gathers `EVENTS_PER_COMMIT` events
or more in it; with less traffic it lengthens so that one would (the events seen in the last
interval over its length: the rate), up to `QUIET_INTERVAL_MAX_S`. What that costs is lag of an
unwatched read (a metrics scrape), at a trickle only: a reader that waits for a sequence asks for it
(`projections.wanted`) and is answered at once, whatever the interval, and the admin API's reads
wait for the streams' ends (`gateway.admin.reads.fresh_for`). At ten seconds the longest interval
still made the transactions two thirds of a trickle's cost (1.07 ms a request at one a second, 0.37
at sixty seconds: docs/performance.md, "The longest interval").

A quiet spell is the longest interval (`QUIET_INTERVAL_MAX_S`, or `base` if longer) with no commit
started: the first event after one still commits after a short linger (`QUIET_LINGER_S`), not at
the end of a lengthened interval. It was one `base` interval, which made every request of a steady
trickle slower than one a second "the first after a quiet spell": two transactions a request,
where one more request a second shared one every ten seconds (docs/performance.md, "The quiet
spell").
"""

from __future__ import annotations

EVENTS_PER_COMMIT = 100  # at 60 requests/s a stream's 120 events a second: the base interval
QUIET_INTERVAL_MAX_S = 60.0
# A lone event after a quiet spell waits this long for the rest of its request (a warm request's
# events span its inference, ~10 ms): one transaction per stream a request instead of two.
QUIET_LINGER_S = 0.025


class Pace:
    def __init__(self, base: float, now: float) -> None:
        self.base = base
        self.most = max(base, QUIET_INTERVAL_MAX_S)
        self.interval = base
        self.started = now - self.most  # the last commit's start: none yet, so a quiet spell

    @property
    def next_start(self) -> float:
        return self.started + self.interval

    def quiet(self, now: float) -> bool:
        """Whether an event arriving now (nothing queued or committing) follows a quiet spell."""
        return now - self.started >= self.most

    def start(self, events: int, now: float) -> None:
        """A commit of `events` starts now: the next may start one interval later, sized by the rate
        of the events it holds (they arrived since the last start)."""
        span = max(now - self.started, 1e-3)
        wanted = span * EVENTS_PER_COMMIT / max(events, 1)  # the time EVENTS_PER_COMMIT take at this rate
        self.interval = min(max(wanted, self.base), self.most)
        self.started = now
