"""What importing some modules pulls in, seen in a fresh interpreter."""

from __future__ import annotations

import subprocess
import sys


def imported_along(modules: list[str], watched: list[str]) -> list[str]:
    """Which of the `watched` top-level packages a fresh interpreter holds after importing `modules`."""
    code = (
        f"import sys, {', '.join(modules)};"
        f"print(','.join(m for m in sys.modules if m.split('.')[0] in {watched!r}))"
    )
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return [name for name in completed.stdout.strip().split(",") if name]
