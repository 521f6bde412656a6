"""`up`'s state file: the processes it has started read it while `up` records the next one, so a
reader sees the previous state or the next, never half of one."""

from __future__ import annotations

import stat
import threading
from pathlib import Path

from modelforge.devstack import stack


def _state(generation: int) -> stack.StackState:
    components = [stack.Component(name=f"agent-{i}", pid=1000 + i, log="x" * 200) for i in range(50)]
    return stack.StackState(components=components, extra={"generation": str(generation)})


def test_a_reader_never_sees_a_half_written_state(tmp_path: Path) -> None:
    stack.save_state(tmp_path, _state(0))
    done = threading.Event()
    seen: list[str] = []
    failures: list[Exception] = []

    def read_until_done() -> None:
        while not done.is_set():
            try:
                seen.append(stack.load_state(tmp_path).extra["generation"])
            except Exception as failure:  # what a half-written file raises is the finding
                failures.append(failure)

    reader = threading.Thread(target=read_until_done)
    reader.start()
    try:
        for generation in range(1, 2000):
            stack.save_state(tmp_path, _state(generation))
    finally:
        done.set()
        reader.join()
    assert failures == []
    assert seen
    assert stack.load_state(tmp_path).extra["generation"] == "1999"


def test_the_state_file_and_operator_token_are_readable_by_their_owner_alone(tmp_path: Path) -> None:
    stack.save_state(tmp_path, _state(0))
    token = stack.operator_token(tmp_path)
    assert len(token) >= 32
    assert stack.operator_token(tmp_path) == token
    for name in ("stack.json", "operator-token"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o600
