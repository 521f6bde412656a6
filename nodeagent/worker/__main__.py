"""`python -m nodeagent.worker --fd N --parent PID`: a worker on the socket its agent passed it.
Its load names what it serves: `--serves NAME` is added to its process title then (`ps`), so a
worker started ahead of its load (a spare) is named like any other.

It dies with its agent (PR_SET_PDEATHSIG), so that a killed agent leaves no model loaded behind.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import logging
import os
import signal
import socket
import sys

import uvloop

from nodeagent.worker.serve import serve
from streams import tracing

_PR_SET_PDEATHSIG = 1


def _die_with(parent: int) -> None:
    libc_name = ctypes.util.find_library("c")
    if libc_name is not None:
        ctypes.CDLL(libc_name, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the agent died before the line above took effect
        sys.exit(1)


async def _run(fd: int) -> None:
    await serve(socket.socket(fileno=fd))


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m nodeagent.worker")
    parser.add_argument("--fd", type=int, required=True, help="the socket the agent passed")
    parser.add_argument("--parent", type=int, required=True, help="the agent's pid")
    args = parser.parse_args()
    _die_with(args.parent)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    tracing.install("modelforge-worker")
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a ^C in the agent's terminal is the agent's to handle
    uvloop.run(_run(args.fd))
    return 0


if __name__ == "__main__":
    sys.exit(main())
