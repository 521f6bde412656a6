"""Where one process of a fresh embedded stack spends its CPU under a workload of `bench.peer`.

cProfile on the CPU clock of the process's main thread (`time.thread_time`), switched on after a
warm-up and off after the workload, then a table of its Python time a request by package and by
function. Why the CPU clock: with the default (wall) clock an event loop on a busy machine is
charged for the time its writes wait for the core (a loopback `send` wakes nats-server, which takes
the core), and a profile of the gateway at one client once put more in a socket write than the
whole process used (docs/performance.md, "Profiling with a CPU clock"). A deterministic profiler
still inflates code made of many small calls (~2.5-3 times here): read the table for shares, and
measure a change with `bench.ab`.

    .venv/bin/python -m bench.cpuprofile [--process gateway] [--workload a] [--seconds 15] \\
        [--top 25] [--save FILE]

How: every Python process the stack starts imports a `sitecustomize` from a temporary folder put
on PYTHONPATH (nothing in the product changes); in it, SIGUSR1 starts a profile and SIGUSR2 stops
it and writes it out.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pstats
import signal
import tempfile
import threading
from collections import Counter
from pathlib import Path

from bench.embedded import embedded_stack
from bench.peer import WORKLOADS, cpu_s, http_child, pids_of

MODEL = "all-MiniLM-L6-v2"  # the demo embedding model `up` serves (bench.peer's default `--model`)

_HOOK = """
import os
if os.environ.get("MF_BENCH_PROFILE_DIR"):
    import cProfile, signal, time
    _running = {}

    def _start(signum, frame):
        _running["profile"] = profile = cProfile.Profile(time.thread_time)
        profile.enable()

    def _stop(signum, frame):
        profile = _running.pop("profile", None)
        if profile is None:
            return
        profile.disable()
        folder = os.environ["MF_BENCH_PROFILE_DIR"]
        profile.dump_stats(f"{folder}/{os.getpid()}.prof")
        with open(f"{folder}/written", "w") as done:  # (a FIFO the benchmark waits on)
            done.write("x")

    signal.signal(signal.SIGUSR1, _start)
    signal.signal(signal.SIGUSR2, _stop)
"""


def package_of(filename: str, function: str) -> str:
    """What a profiled function belongs to: a distribution, a folder of this repository, a module
    of the standard library, or a builtin."""
    if filename == "~":
        return "builtin " + function.strip("<>").removeprefix("built-in ").split(" of ")[0]
    if filename.startswith("<"):  # (<frozen ...>, <string>)
        return filename
    if "site-packages/" in filename:
        return filename.split("site-packages/", 1)[1].split("/", 1)[0]
    here = str(Path(__file__).resolve().parent.parent) + "/"
    if filename.startswith(here):
        return "/".join(filename[len(here) :].split("/")[:2])
    return "std " + Path(filename).stem


def report(stats: pstats.Stats, requests: int, cpu_ms: float, top: int) -> str:
    per_package: Counter[str] = Counter()
    calls: Counter[str] = Counter()
    functions: list[tuple[float, float, str]] = []
    for (filename, line, function), (_, count, own, _cumulative, _) in stats.stats.items():  # type: ignore[attr-defined]
        package = package_of(filename, function)
        per_package[package] += own
        calls[package] += count
        functions.append((own, count, f"{package}: {Path(filename).name}:{line} {function}"))
    total = sum(per_package.values())
    lines = [
        f"{requests} requests; the process's CPU {cpu_ms / requests:.3f} ms a request "
        f"(under the profiler), profiled Python time {total * 1000 / requests:.3f} ms and "
        f"{sum(calls.values()) / requests:.0f} calls a request",
        "",
        f"{'ms/req':>8} {'share':>6} {'calls/req':>9}  package",
    ]
    for package, own in per_package.most_common(top):
        lines.append(
            f"{own * 1000 / requests:8.3f} {own / total:6.1%} {calls[package] / requests:9.1f}  {package}"
        )
    lines += ["", f"{'ms/req':>8} {'calls/req':>9}  function (own time)"]
    for own, count, name in sorted(functions, reverse=True)[:top]:
        lines.append(f"{own * 1000 / requests:8.3f} {count / requests:9.1f}  {name}")
    return "\n".join(lines)


def _pid_of(processes: dict[str, str], process: str) -> int:
    """The process's pid (a worker: the embedded agent's one child that serves, the MiniLM worker
    `up` starts, whose title says `--serves`; its spare's does not)."""
    if process != "worker":
        return int(processes[process].rstrip("+"))
    agent = int(processes["agent"].rstrip("+"))
    workers = [
        pid
        for pid in pids_of(f"{agent}+")
        if pid != agent
        and b"--serves" in Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").split()
    ]
    if len(workers) != 1:
        raise SystemExit(f"expected one model worker under the agent (pid {agent}), found {workers}")
    return workers[0]


def _wait_for(fifo: Path, timeout: float) -> bool:
    """Whether the hook said it wrote its profile within `timeout` (a blocking read in a thread)."""
    said = threading.Event()

    def read() -> None:
        with open(fifo) as done:
            if done.read():
                said.set()

    threading.Thread(target=read, daemon=True).start()
    return said.wait(timeout)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--process",
        default="gateway",
        choices=["gateway", "agent", "worker"],
        help="the gateway, the node agent, or the agent's model worker (its main thread: the engine's "
        "own threads are not profiled)",
    )
    parser.add_argument("--workload", default="a", choices=sorted(WORKLOADS))
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--save", type=Path, help="keep the raw profile (pstats) here")
    args = parser.parse_args()
    clients, per_request = WORKLOADS[args.workload]
    with tempfile.TemporaryDirectory(prefix="mf-cpuprofile-") as folder:
        hook, out = Path(folder, "hook"), Path(folder, "out")
        hook.mkdir()
        out.mkdir()
        (hook / "sitecustomize.py").write_text(_HOOK)
        os.mkfifo(out / "written")
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(hook), os.environ.get("PYTHONPATH")]))
        os.environ["MF_BENCH_PROFILE_DIR"] = str(out)
        with embedded_stack() as stack:
            pid = _pid_of(stack.cpu, args.process)
            asyncio.run(http_child(stack.url, stack.key, MODEL, clients, per_request, 3.0))  # warm-up
            os.kill(pid, signal.SIGUSR1)
            began = cpu_s(pid)
            done = asyncio.run(http_child(stack.url, stack.key, MODEL, clients, per_request, args.seconds))
            cpu_ms = (cpu_s(pid) - began) * 1000
            os.kill(pid, signal.SIGUSR2)
            if not _wait_for(out / "written", 30.0):
                raise SystemExit(f"the {args.process} (pid {pid}) wrote no profile within 30 s")
            stats = pstats.Stats(str(out / f"{pid}.prof"))
            if args.save:
                stats.dump_stats(str(args.save))
    print(
        f"{args.process}, workload ({args.workload}), {args.seconds:g} s, errors {done['errors'] or 'none'}"
    )
    print(report(stats, done["requests"], cpu_ms, args.top))


if __name__ == "__main__":
    main()
