"""A child the embedded stack starts is reaped through the Popen that started it, never by its bare
pid: a Popen left to poll a pid that was reaped behind it could, once pids wrap, reap another child
of the same process from under whoever waits for it (a test's worker read as "exit status 255")."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from modelforge.devstack.processes import exited, started, stop_pid


def _sleeper() -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


def test_stopping_a_started_child_reaps_it_through_its_popen() -> None:
    process = _sleeper()
    assert stop_pid(started(process))
    assert process.returncode == -signal.SIGTERM  # its Popen knows: it will not wait on the pid again


def test_a_started_child_that_ended_unstopped_is_reaped_when_the_next_one_starts() -> None:
    ended = _sleeper()
    started(ended)
    ended.send_signal(signal.SIGKILL)  # ended by someone else: no one here waits for it
    os.waitid(os.P_PID, ended.pid, os.WEXITED | os.WNOWAIT)  # it has ended (left unreaped)
    other = _sleeper()
    try:
        started(other)
        assert ended.returncode == -signal.SIGKILL  # reaped then, through its Popen
        assert not exited(other.pid)
    finally:
        stop_pid(other.pid)
