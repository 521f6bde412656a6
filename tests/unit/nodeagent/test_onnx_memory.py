"""What a loaded ONNX Runtime session keeps resident."""

from __future__ import annotations

from pathlib import Path

from nodeagent.runtimes.base import RuntimeOptions
from nodeagent.runtimes.onnx import OnnxRuntimeCpu
from nodeagent.runtimes.process_memory import process_rss_bytes, release_freed_heap

# Without the trim, loading MiniLM with lanes left ~120 MiB that trimming then returned.
LEFT_TO_TRIM_BYTES = 16 << 20


def test_loading_leaves_no_freed_heap_resident(minilm_dir: Path) -> None:
    release_freed_heap()
    runtime = OnnxRuntimeCpu()
    runtime.load(minilm_dir / "model.onnx", RuntimeOptions(intra_op_threads=2, lanes=2))
    try:
        loaded = process_rss_bytes()
        release_freed_heap()
        assert loaded - process_rss_bytes() < LEFT_TO_TRIM_BYTES
    finally:
        runtime.unload()
