"""A process the `modelforge` CLI starts (its console script, `python -m modelforge.cli`) hides the
packages it never uses: nats-py then goes without aiohttp (its WebSocket transport), which cost each
such process ~130 ms of CPU at start and ~11 MiB resident where the dev extras installed it."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import entry_points

_LOADED_BY_A_CLI_PROCESS = """
import sys
import modelforge.cli as cli
sys.argv = ["modelforge", "gateway", "--help"]  # the gateway's modules imported, then an exit
try:
    cli.run()
except SystemExit:
    pass
print(sorted(name for name in ("nats.aio.client", "aiohttp.client") if name in sys.modules))
"""


def test_a_cli_process_speaks_nats_without_loading_aiohttp() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _LOADED_BY_A_CLI_PROCESS],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert done.stdout.strip().splitlines()[-1] == "['nats.aio.client']"


def test_the_console_script_starts_the_cli_through_run() -> None:
    (script,) = [entry for entry in entry_points(group="console_scripts") if entry.name == "modelforge"]
    assert script.value == "modelforge.cli:run"
