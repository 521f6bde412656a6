"""Per-process memory measurement for CPU runtimes."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import resource
from pathlib import Path

_STATM = Path("/proc/self/statm")


def process_rss_bytes() -> int:
    """Resident set size of this process now (Linux /proc; elsewhere the lifetime peak)."""
    try:
        resident_pages = int(_STATM.read_text().split()[1])
        return resident_pages * os.sysconf("SC_PAGE_SIZE")
    except (OSError, IndexError, ValueError):
        # ru_maxrss is a peak, in KiB on Linux; better than nothing where /proc is absent.
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


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
