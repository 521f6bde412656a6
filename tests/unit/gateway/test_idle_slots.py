"""Slots kept a moment for a replica's next request: which is taken, and what closing lets go."""

from __future__ import annotations

from gateway.clients.idle_slots import IdleSlots, Kept


async def test_the_slot_kept_longest_is_taken_first() -> None:
    let_go: list[int] = []

    async def record(group: str, kept: Kept) -> None:
        let_go.append(kept.slot)

    idle = IdleSlots(record)
    idle.keep("clients.a", Kept(slot=3, sequence=10, renewed_at=0.0))
    idle.keep("clients.a", Kept(slot=5, sequence=11, renewed_at=0.0))
    taken = idle.take("clients.a")
    assert taken is not None
    assert taken.slot == 3
    assert idle.count("clients.a") == 1
    await idle.close()
    assert let_go == [5]


async def test_no_slot_is_taken_from_another_group() -> None:
    async def ignore(group: str, kept: Kept) -> None:
        return None

    idle = IdleSlots(ignore)
    idle.keep("clients.a", Kept(slot=3, sequence=10, renewed_at=0.0))
    assert idle.take("clients.b") is None
    await idle.close()


async def test_closing_lets_every_kept_slot_go() -> None:
    let_go: list[tuple[str, int]] = []

    async def record(group: str, kept: Kept) -> None:
        let_go.append((group, kept.sequence))

    idle = IdleSlots(record)
    idle.keep("clients.a", Kept(slot=1, sequence=7, renewed_at=0.0))
    idle.keep("clients.b", Kept(slot=1, sequence=8, renewed_at=0.0))
    await idle.close()
    assert sorted(let_go) == [("clients.a", 7), ("clients.b", 8)]
    assert idle.take("clients.a") is None
