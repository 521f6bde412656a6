"""Per-process memory measurement: this process's (CPU runtimes) and a worker's (the agent)."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import resource

_STATM = "/proc/self/statm"
_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")


def process_rss_bytes() -> int:
    """Resident set size of this process now (Linux /proc; elsewhere the lifetime peak).

    Sampled after every runtime call, on the request's path: plain descriptor reads cost a fifth
    of a text-mode file object's open, decode and close."""
    try:
        fd = os.open(_STATM, os.O_RDONLY)
        try:
            resident_pages = int(os.read(fd, 256).split()[1])
        finally:
            os.close(fd)
        return resident_pages * _PAGE_BYTES
    except (OSError, IndexError, ValueError):
        # ru_maxrss is a peak, in KiB on Linux; better than nothing where /proc is absent.
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def rss_of(pid: int) -> int:
    """Resident set size of process `pid` now; 0 once it is gone."""
    try:
        with open(f"/proc/{pid}/statm", "rb") as statm:
            return int(statm.read().split()[1]) * _PAGE_BYTES
    except (OSError, IndexError, ValueError):
        return 0


def peak_rss_of(pid: int) -> int:
    """The highest resident set size process `pid` has had (VmHWM); 0 once it is gone."""
    try:
        with open(f"/proc/{pid}/status", "rb") as status:
            for line in status:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1]) * 1024  # kB
    except (OSError, IndexError, ValueError):
        pass
    return 0


def release_freed_heap() -> None:
    """Ask glibc to hand freed heap pages back to the OS, so RSS shows what an unload reclaimed."""
    libc_name = ctypes.util.find_library("c")
    if libc_name is None:
        return
    try:
        libc = ctypes.CDLL(libc_name)
        libc.malloc_trim(0)
    except (OSError, AttributeError):
        return  # not glibc: RSS will simply lag behind
