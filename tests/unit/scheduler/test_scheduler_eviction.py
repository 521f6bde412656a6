"""Which idle residents are evicted, in which order, and never more of them than needed."""

from __future__ import annotations

import math

from sched_builders import gib, gpu, lease, resident

from gateway.scheduler import Channel, ResidencyState, choose_evictions, eviction_order
from gateway.scheduler.eviction import eviction_candidates, eviction_cost_floor

LAB, PROD = Channel.LAB, Channel.PRODUCTION


def ids(residents: object) -> list[str]:
    assert isinstance(residents, tuple | list)
    return [item.deployment_id for item in residents]


def test_lab_residents_go_before_production_ones() -> None:
    prod = resident("prod", 4, channel=PROD, last_used_at=1.0)
    lab = resident("lab", 4, channel=LAB, last_used_at=9.0)
    assert ids(choose_evictions([prod, lab], gib(4)) or ()) == ["lab"]


def test_least_recently_used_goes_first_within_a_channel() -> None:
    old = resident("old", 4, last_used_at=1.0)
    new = resident("new", 4, last_used_at=9.0)
    assert ids(choose_evictions([new, old], gib(4)) or ()) == ["old"]


def test_cheapest_to_reload_goes_first_among_equally_recent() -> None:
    slow = resident("slow", 4, last_used_at=5.0, reload_cost_ms=9000.0)
    quick = resident("quick", 4, last_used_at=5.0, reload_cost_ms=500.0)
    assert ids(choose_evictions([slow, quick], gib(4)) or ()) == ["quick"]


def test_members_that_turn_out_unnecessary_are_dropped() -> None:
    # Cheapest first takes the 1 GiB lab model, then the 10 GiB one; the 10 GiB alone is enough.
    tiny = resident("tiny", 1, channel=LAB, last_used_at=1.0)
    large = resident("large", 10, channel=LAB, last_used_at=2.0)
    assert ids(choose_evictions([tiny, large], gib(9)) or ()) == ["large"]


def test_nothing_is_evicted_when_nothing_is_needed() -> None:
    assert choose_evictions([resident("a", 4)], 0) == ()


def test_no_set_when_all_candidates_together_are_not_enough() -> None:
    assert choose_evictions([resident("a", 4), resident("b", 4)], gib(9)) is None


def test_busy_always_warm_and_transitional_residents_are_never_candidates() -> None:
    state = gpu(
        residents=(
            resident("idle", 2),
            resident("counted-busy", 2, active_leases=1),
            resident("leased", 2),
            resident("always-warm", 2, always_warm=True),
            resident("loading", 2, state=ResidencyState.LOADING),
            resident("unloading", 2, state=ResidencyState.UNLOADING),
        ),
        leases=(lease("l1", "leased", 1),),
    )
    assert ids(eviction_candidates(state, PROD)) == ["idle"]


def test_a_lab_request_may_evict_only_lab_residents() -> None:
    state = gpu(residents=(resident("lab", 2, channel=LAB), resident("prod", 2, channel=PROD)))
    assert ids(eviction_candidates(state, LAB)) == ["lab"]
    assert sorted(ids(eviction_candidates(state, PROD))) == ["lab", "prod"]


def test_candidates_come_cheapest_first() -> None:
    residents = (
        resident("p-old", 1, channel=PROD, last_used_at=1.0),
        resident("l-new", 1, channel=LAB, last_used_at=8.0),
        resident("l-old-slow", 1, channel=LAB, last_used_at=2.0, reload_cost_ms=900.0),
        resident("l-old-quick", 1, channel=LAB, last_used_at=2.0, reload_cost_ms=100.0),
    )
    ordered = eviction_candidates(gpu(residents=residents), PROD)
    assert ids(ordered) == ["l-old-quick", "l-old-slow", "l-new", "p-old"]
    assert ordered == sorted(residents, key=eviction_order)


def test_the_cost_floor_reads_production_residents_only_when_lab_ones_cannot_cover() -> None:
    state = gpu(
        residents=(
            resident("lab", 4, channel=LAB, reload_cost_ms=300.0),
            resident("prod", 8, channel=PROD, reload_cost_ms=math.nan),
        )
    )
    # lab alone can free 3 GiB: at best one lab victim, whatever production costs to reload
    assert eviction_cost_floor(state, PROD, "new-model", (), gib(3)) == ((0, 300.0, 1), gib(1))
    # 6 GiB takes a production victim too, and a NaN reload cost bounds nothing
    assert eviction_cost_floor(state, PROD, "new-model", (), gib(6)) is None
