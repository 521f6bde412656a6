"""Standby leases: room a gateway replica books on the log ahead of time, so that warm requests
run without a lease append of their own, and keep being served while MF_EVENTS elects a leader
(no append can land then).

A standby lease is an ordinary `LeaseGranted` (every replica's placement and the replay's
over-commit check count its bytes) whose id starts with `STANDBY_PREFIX`. A replica holds at
most one per resident deployment and accelerator, sized for `slots` requests of the deployment
(`slots` × its warm per-request bytes). A warm request takes a free slot of one with no append;
the slots are this replica's alone (`StandbySlots`), so never more requests run under a standby
lease than its bytes were booked for. Their use reaches the books with the lease's renewal
(`Wanted.used_at`), which comes early once a slot has been taken.

Which residents get one (`plan_standby`), decided here without I/O:

- a LOADED resident on an available accelerator, whose per-request bytes are known;
- only where the lease leaves room for one more normal request of the largest resident there
  (`schedulable - lease >= largest per-request need`) and pressure is NORMAL or ELEVATED: a
  standby lease never takes the last room a normal request needs, and never causes an eviction
  (booking one is not a placement decision, only a lease within headroom).

A standby lease does not make its resident busy: the live view counts it neither as an active lease
nor, but for a renewal's `used_at`, as a use (`is_standby`), so keep-warm TTLs, idle replicas,
placement's evictions and an operator's unload go ahead as if it were not there. Once such an
eviction lands, the resident is UNLOADING and every holder lets its standby lease go on its next
upkeep round: a standby lease never blocks an unload. Held leases are also let go when their
resident or accelerator stops qualifying, when the room is wanted (less headroom than one normal
request, HIGH or CRITICAL pressure; only while no slot of it is in use), and replaced (renewed)
before they expire.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

import msgspec

from gateway.scheduler.accounting import account
from gateway.scheduler.policy import SchedulerPolicy
from gateway.scheduler.state import STANDBY_PREFIX, AcceleratorState, Pressure, ResidencyState, is_standby

__all__ = ["STANDBY_PREFIX", "Held", "StandbyPlan", "StandbySlots", "Wanted", "is_standby", "plan_standby"]
_CRAMPED = (Pressure.HIGH, Pressure.CRITICAL)
_HOLDER = "standby:"


def standby_lease_id(unique: str) -> str:
    return STANDBY_PREFIX + unique


def holder_of(replica_id: str) -> str:
    """The `client_id` a replica's standby leases carry: whose they are."""
    return f"{_HOLDER}{replica_id}"


def replica_of(client_id: str) -> str:
    """The replica whose standby lease carries `client_id` ("": not a standby lease's)."""
    return client_id.removeprefix(_HOLDER) if client_id.startswith(_HOLDER) else ""


class Held(msgspec.Struct, frozen=True, kw_only=True):
    """A standby lease this replica holds (on the books)."""

    lease_id: str
    accelerator_id: str
    node_id: str
    deployment_id: str
    reserved_bytes: int
    expires_at: float  # POSIX s
    granted_at: float = 0.0  # POSIX s (0: not known, as for one adopted after a restart)


class Wanted(msgspec.Struct, frozen=True, kw_only=True):
    """A standby lease to book: for `deployment_id` on `accelerator_id`, of `reserved_bytes`."""

    accelerator_id: str
    node_id: str
    deployment_id: str
    reserved_bytes: int
    used_at: float | None = None  # a renewal's: the last request run under the lease it replaces


class StandbyPlan(msgspec.Struct, frozen=True):
    book: tuple[Wanted, ...] = ()
    renew: tuple[tuple[Held, Wanted], ...] = ()  # (the lease to let go, its successor), one append
    release: tuple[Held, ...] = ()


def plan_standby(
    accelerators: Iterable[AcceleratorState],
    per_request: Mapping[str, int],
    held: Sequence[Held],
    in_use: Mapping[str, int],
    slots: int,
    policy: SchedulerPolicy,
    now: float,
    renew_within_s: float,
    unrecorded_use: Mapping[str, float] | None = None,
    record_use_s: float = 0.0,
) -> StandbyPlan:
    """What the replica should book, renew and let go now. `per_request`: each deployment's warm
    per-request bytes (absent: not known, no standby lease); `held`: the replica's standby leases
    on the books; `in_use`: their slots in use, by lease id; `renew_within_s`: a lease expiring
    sooner than this is renewed. `unrecorded_use`: when a slot of a held lease was last taken, for
    uses not yet on the books; a lease so used is renewed once it is `record_use_s` old, its
    successor carrying that use (`Wanted.used_at`)."""
    unrecorded = unrecorded_use or {}
    states = {state.accelerator_id: state for state in accelerators}
    kept: dict[tuple[str, str], Held] = {}
    book: list[Wanted] = []
    renew: list[tuple[Held, Wanted]] = []
    release: list[Held] = []
    for lease in sorted(held, key=lambda h: h.lease_id):
        state = states.get(lease.accelerator_id)
        size = per_request.get(lease.deployment_id, 0) * slots
        key = (lease.accelerator_id, lease.deployment_id)
        busy = in_use.get(lease.lease_id, 0) > 0
        due = lease.expires_at - now <= renew_within_s or (
            lease.lease_id in unrecorded and now - lease.granted_at >= record_use_s
        )
        if busy and state is not None and not state.available and _loaded(state, lease.deployment_id):
            # Its node stopped qualifying (silent, say) with requests under its slots: kept as it is
            # until they end. Should the node be declared lost, its reconciliation drops the lease
            # and ends them at once; a release now would leave them to their deadlines.
            if due:
                renew.append(_renewal(lease, lease.reserved_bytes, unrecorded))
        elif state is None or not _qualifies(state, lease.deployment_id) or size <= 0 or key in kept:
            release.append(lease)
        elif not busy and (
            state.pressure.level in _CRAMPED or _headroom(state, policy, now) < _largest(state, per_request)
        ):
            release.append(lease)  # the room is wanted by normal requests
        elif lease.reserved_bytes != size or due:
            renew.append(_renewal(lease, size, unrecorded))
            kept[key] = lease
        else:
            kept[key] = lease
    for state in sorted(states.values(), key=lambda s: s.accelerator_id):
        headroom = _headroom(state, policy, now)
        largest = _largest(state, per_request)
        if state.pressure.level in _CRAMPED:
            continue
        for resident in state.residents:
            size = per_request.get(resident.deployment_id, 0) * slots
            key = (state.accelerator_id, resident.deployment_id)
            if key in kept or size <= 0 or not _qualifies(state, resident.deployment_id):
                continue
            if headroom - size < largest:
                continue
            headroom -= size
            book.append(
                Wanted(
                    accelerator_id=state.accelerator_id,
                    node_id=state.node_id,
                    deployment_id=resident.deployment_id,
                    reserved_bytes=size,
                )
            )
    return StandbyPlan(tuple(book), tuple(renew), tuple(release))


def _renewal(lease: Held, size: int, unrecorded: Mapping[str, float]) -> tuple[Held, Wanted]:
    """The lease and its successor of `size` bytes, carrying its last use not yet on the books."""
    return lease, Wanted(**_where(lease), reserved_bytes=size, used_at=unrecorded.get(lease.lease_id))


def _where(lease: Held) -> dict[str, str]:
    return {
        "accelerator_id": lease.accelerator_id,
        "node_id": lease.node_id,
        "deployment_id": lease.deployment_id,
    }


def _qualifies(state: AcceleratorState, deployment_id: str) -> bool:
    return state.available and _loaded(state, deployment_id)


def _loaded(state: AcceleratorState, deployment_id: str) -> bool:
    return any(r.deployment_id == deployment_id and r.state is ResidencyState.LOADED for r in state.residents)


def _headroom(state: AcceleratorState, policy: SchedulerPolicy, now: float) -> int:
    return account(state, policy, now).schedulable_bytes


def _largest(state: AcceleratorState, per_request: Mapping[str, int]) -> int:
    """The most one normal warm request of a resident here needs."""
    return max((per_request.get(r.deployment_id, 0) for r in state.residents), default=0)


class StandbySlots:
    """This replica's standby leases and how many of each one's slots are taken (no I/O).

    A request takes a slot with `take` and gives it back with `give_back`; a lease let go keeps
    counting the requests still running under it until they give their slots back, and a renewed
    lease's successor inherits its taken slots (`renewed`)."""

    def __init__(self, slots: int) -> None:
        self.slots = slots
        self.held: dict[str, Held] = {}
        self.in_use: dict[str, int] = {}
        # when a slot of each held lease was last taken, for uses not yet on the books (a renewal
        # records them: `plan_standby`)
        self.unrecorded_use: dict[str, float] = {}
        self.on_first_use: Callable[[], None] | None = None  # called when a lease gets its first such use
        self._moved: dict[str, str] = {}  # a renewed lease -> its successor (where its slots went)
        self._freed: list[Callable[[], None]] = []  # called once, at the next slot given back

    def on_free(self, call: Callable[[], None]) -> None:
        """Call `call` once, when the next slot is given back."""
        self._freed.append(call)

    def holds(self, deployment_id: str) -> bool:
        return any(h.deployment_id == deployment_id for h in self.held.values())

    def hold(self, lease: Held) -> None:
        self.held[lease.lease_id] = lease

    def drop(self, lease_id: str) -> None:
        self.held.pop(lease_id, None)
        self.unrecorded_use.pop(lease_id, None)

    def renewed(self, old: str, new: Held) -> None:
        """`new` replaces `old`: requests running under `old` now count against `new` too."""
        self.held.pop(old, None)
        self.unrecorded_use.pop(old, None)  # on the books now, in `new`'s grant
        self.held[new.lease_id] = new
        carried = self.in_use.pop(old, 0)
        if carried:
            self.in_use[new.lease_id] = self.in_use.get(new.lease_id, 0) + carried
            self._moved[old] = new.lease_id

    def free(self, lease_id: str) -> int:
        return self.slots - self.in_use.get(lease_id, 0) if lease_id in self.held else 0

    def take(
        self,
        deployment_id: str,
        avoid: str = "",
        usable: Callable[[Held], bool] | None = None,
        at: float = 0.0,
    ) -> Held | None:
        """A slot of a held lease of the deployment (the one with the most free, then by id; not on
        `avoid`, and only one `usable` says may serve now), taken at `at` (POSIX s), or None."""
        best: Held | None = None
        best_free = 0
        for lease in sorted(self.held.values(), key=lambda h: h.lease_id):
            if lease.deployment_id != deployment_id or lease.accelerator_id == avoid:
                continue
            if usable is not None and not usable(lease):
                continue
            free = self.free(lease.lease_id)
            if free > best_free:
                best, best_free = lease, free
        if best is not None:
            self.in_use[best.lease_id] = self.in_use.get(best.lease_id, 0) + 1
            first = best.lease_id not in self.unrecorded_use
            self.unrecorded_use[best.lease_id] = at
            if first and self.on_first_use is not None:
                self.on_first_use()
        return best

    def give_back(self, lease_id: str) -> None:
        """The slot a request took of `lease_id` (or of what renewed it) is free again."""
        freed, self._freed = self._freed, []
        for call in freed:
            call()
        while lease_id in self._moved and lease_id not in self.in_use:
            lease_id = self._moved[lease_id]
        left = self.in_use.get(lease_id, 0) - 1
        if left > 0:
            self.in_use[lease_id] = left
            return
        self.in_use.pop(lease_id, None)
        for old in [old for old, new in self._moved.items() if new == lease_id]:
            del self._moved[old]  # nothing runs under it any more
