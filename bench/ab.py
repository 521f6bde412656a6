"""Before / after: two source trees' embedded stacks up at once, the same load on each in turn for
a few seconds at a time, CPU per request of each process for both.

This box's speed drifts by a fifth within minutes (the same code measured 1.04, 1.52 and 1.73 ms of
gateway CPU a request in three `bench.peer --up` runs a minute apart), more than most changes
move it, so a before / after made of whole runs minutes apart measures the drift. Here both
stacks are up for the whole comparison and the load alternates between them every `--seconds`
(A then B, then B then A, ...), so each round's pair shares the machine's state of that moment;
each round gives a ratio (after ÷ before) per process, and the summary is their median with a
bootstrap 95 % interval over rounds. A change that moves the interval clear of 1.00 moved the
number; one whose interval straddles it did not, at this resolution.

    git worktree add /tmp/before <commit>        # the tree to compare against
    .venv/bin/python -m bench.ab --before /tmp/before --after . [--workload a] [--rounds 20] [--seconds 3]

Each tree's stack runs under this interpreter from that tree (so both use this venv's
dependencies); the load generator is `bench.peer`'s. Both stacks idle while the other is loaded
(a few ms of CPU a second), which both pay alike.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import statistics
from pathlib import Path
from typing import Any

from bench.embedded import Stack, embedded_stack
from bench.peer import WORKLOADS, cpu_s, pids_of, run_child

SIDES = ("before", "after")


class Round:
    """One side's share of a round: requests answered and each process group's CPU seconds."""

    def __init__(self, result: dict[str, Any], cpu: dict[str, float]) -> None:
        self.requests = result["requests"] + 1  # (with the load generator's checked first call)
        self.errors = result["errors"]
        self.cpu = cpu

    def ms_per_request(self, group: str) -> float:
        return self.cpu[group] * 1000 / self.requests


def interval(ratios: list[float], draws: int = 2000) -> tuple[float, float]:
    """A percentile bootstrap 95 % interval of the median (seeded: the same rounds, the same
    interval)."""
    rng = random.Random(20)
    medians = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(draws))
    return medians[int(0.025 * draws)], medians[int(0.975 * draws) - 1]


async def alternate(
    stacks: dict[str, Stack], workload: str, rounds: int, seconds: float
) -> dict[str, list[Round]]:
    clients, per_request = WORKLOADS[workload]
    groups = {side: {g: pids_of(spec) for g, spec in stack.cpu.items()} for side, stack in stacks.items()}
    measured: dict[str, list[Round]] = {side: [] for side in stacks}
    for number in range(rounds):
        for side in SIDES if number % 2 == 0 else SIDES[::-1]:
            stack, pids = stacks[side], groups[side]
            before = {g: sum(cpu_s(pid) for pid in ps) for g, ps in pids.items()}
            result = await run_child("http", stack.url, stack.key, "", clients, per_request, seconds, "")
            after = {g: sum(cpu_s(pid) for pid in ps) for g, ps in pids.items()}
            measured[side].append(Round(result, {g: after[g] - before[g] for g in pids}))
        print(f"  round {number + 1}: " + ", ".join(
            f"{side} gateway {measured[side][-1].ms_per_request('gateway'):.3f}" for side in SIDES
        ), flush=True)  # fmt: skip
    return measured


def report(measured: dict[str, list[Round]]) -> None:
    before, after = measured["before"], measured["after"]
    print(f"\n{'process':<11}{'before ms/req':>14}{'after ms/req':>13}{'after ÷ before':>16}  95 % interval")
    for group in before[0].cpu:
        totals = [
            sum(r.cpu[group] for r in side) * 1000 / sum(r.requests for r in side) for side in (before, after)
        ]
        ratios = [
            a.ms_per_request(group) / b.ms_per_request(group)
            for b, a in zip(before, after, strict=True)
            if b.cpu[group] > 0
        ]
        low, high = interval(ratios) if ratios else (float("nan"), float("nan"))
        median = statistics.median(ratios) if ratios else float("nan")
        print(f"{group:<11}{totals[0]:>14.3f}{totals[1]:>13.3f}{median:>16.3f}  {low:.3f} - {high:.3f}")
    for side in SIDES:
        errors = [r.errors for r in measured[side] if r.errors]
        print(f"{side}: {sum(r.requests for r in measured[side])} requests; errors {errors or 'none'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", required=True, help="the source tree to compare against")
    parser.add_argument("--after", required=True, help="the source tree with the change")
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="a")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=3.0, help="each side's share of a round")
    args = parser.parse_args()
    trees = {"before": Path(args.before).resolve(), "after": Path(args.after).resolve()}
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at start; workload ({args.workload}), "
          f"{args.rounds} rounds of {args.seconds:g} s a side")  # fmt: skip
    with contextlib.ExitStack() as up:
        stacks = {}
        here = Path.cwd()
        for side, tree in trees.items():
            # `python -m` puts its working folder first on the path, ahead of PYTHONPATH: the
            # stack's processes inherit both, and import the tree's code.
            os.environ["PYTHONPATH"] = str(tree)
            os.chdir(tree)
            try:
                stacks[side] = up.enter_context(embedded_stack())
            finally:
                del os.environ["PYTHONPATH"]
                os.chdir(here)
        report(asyncio.run(alternate(stacks, args.workload, args.rounds, args.seconds)))


if __name__ == "__main__":
    main()
