"""bench.cpuprofile shares a profile out by what each function belongs to, per request."""

from __future__ import annotations

import cProfile
import pstats
import time
from pathlib import Path

import msgspec

from bench.cpuprofile import package_of, report

REPO = str(Path(__file__).resolve().parents[2])


def test_a_function_of_this_repository_belongs_to_its_folder_and_subfolder() -> None:
    assert package_of(f"{REPO}/gateway/serving/pipeline.py", "serve") == "gateway/serving"
    assert package_of(f"{REPO}/streams/tracing.py", "inject") == "streams/tracing.py"


def test_an_installed_function_belongs_to_its_distribution_and_a_builtin_to_its_name() -> None:
    assert package_of("/venv/lib/python3.11/site-packages/nats/aio/client.py", "_read_loop") == "nats"
    assert package_of("/usr/lib/python3.11/asyncio/tasks.py", "create_task") == "std tasks"
    assert package_of("~", "<method 'get' of 'dict' objects>") == "builtin method 'get'"


def test_the_report_gives_each_package_its_time_and_calls_a_request() -> None:
    profile = cProfile.Profile(time.thread_time)
    profile.enable()
    for _ in range(40):
        msgspec.json.decode(msgspec.json.encode({"n": list(range(200))}))
    profile.disable()
    text = report(pstats.Stats(profile), requests=4, cpu_ms=2.0, top=5)
    assert text.startswith("4 requests; the process's CPU 0.500 ms a request")
    packages = text.split("\n\n")[1].splitlines()[1:]
    assert any(line.endswith("builtin method msgspec._core.json_decode") for line in packages)
    times = [float(line.split()[0]) for line in packages]
    assert times == sorted(times, reverse=True)  # the most time first
    assert sum(float(line.split()[1].rstrip("%")) for line in packages) > 99.0  # shares of the whole
