from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from nodeagent.runtimes.base import RuntimeOptions, TensorSpec
from nodeagent.runtimes.onnx import OnnxRuntimeCpu
from nodeagent.runtimes.select import RuntimeKind, choose_runtime_kind, create_runtime, select_runtime
from nodeagent.runtimes.tensorrt_plan import ShapeProfile, derive_profiles, engine_cache_key
from tests.support.imports import imported_along

TEXT_INPUTS = [
    TensorSpec("input_ids", ("batch", "sequence"), np.dtype(np.int64)),
    TensorSpec("attention_mask", (None, None), np.dtype(np.int64)),
]
SHA = "ab" * 32


def test_profiles_cover_dynamic_batch_and_sequence() -> None:
    profiles = derive_profiles(TEXT_INPUTS, max_batch=32, max_seq=256)
    assert profiles == (
        ShapeProfile("input_ids", (1, 1), (16, 128), (32, 256)),
        ShapeProfile("attention_mask", (1, 1), (16, 128), (32, 256)),
    )


def test_fixed_dims_stay_fixed_and_opt_is_configurable() -> None:
    spec = TensorSpec("pixel_values", ("batch", 3, 224, 224), np.dtype(np.float32))
    (profile,) = derive_profiles([spec], max_batch=8, max_seq=1, opt_batch=4)
    assert profile == ShapeProfile("pixel_values", (1, 3, 224, 224), (4, 3, 224, 224), (8, 3, 224, 224))


@pytest.mark.parametrize(
    ("specs", "kwargs", "why"),
    [
        ([TensorSpec("x", ("batch", "height", "width"), np.dtype(np.float32))], {}, "neither batch nor"),
        (TEXT_INPUTS, {"opt_batch": 64}, "opt shapes"),
        (TEXT_INPUTS, {"max_batch": 0}, "at least 1"),
    ],
)
def test_underivable_profiles_are_rejected(specs: list[TensorSpec], kwargs: dict[str, int], why: str) -> None:
    arguments = {"max_batch": 32, "max_seq": 256, **kwargs}
    with pytest.raises(ValueError, match=why):
        derive_profiles(specs, **arguments)


def test_cache_key_changes_with_each_component() -> None:
    profiles = derive_profiles(TEXT_INPUTS, 32, 256)
    base = {
        "onnx_sha256": SHA,
        "tensorrt_version": "10.3.0",
        "compute_capability": (9, 0),
        "profiles": profiles,
        "precision": "fp16",
    }
    variants = {
        "onnx_sha256": "cd" * 32,
        "tensorrt_version": "10.4.0",
        "compute_capability": (8, 9),
        "profiles": derive_profiles(TEXT_INPUTS, 64, 256),
        "precision": "fp32",
    }
    base_key = engine_cache_key(**base)  # type: ignore[arg-type]
    assert base_key == engine_cache_key(**base)  # type: ignore[arg-type]
    keys = {name: engine_cache_key(**{**base, name: value}) for name, value in variants.items()}  # type: ignore[arg-type]
    assert base_key not in keys.values()
    assert len(set(keys.values())) == len(variants)
    assert engine_cache_key(**{**base, "compute_capability": "9.0"}) == base_key  # type: ignore[arg-type]
    assert engine_cache_key(**{**base, "onnx_sha256": SHA.upper()}) == base_key  # type: ignore[arg-type]


@pytest.mark.parametrize(("field", "value"), [("onnx_sha256", "not-a-hash"), ("precision", "fp8x")])
def test_cache_key_rejects_bad_inputs(field: str, value: str) -> None:
    arguments = {
        "onnx_sha256": SHA,
        "tensorrt_version": "10",
        "compute_capability": (9, 0),
        "profiles": (),
        "precision": "fp16",
        field: value,
    }
    with pytest.raises(ValueError, match=field.split("_")[0]):
        engine_cache_key(**arguments)  # type: ignore[arg-type]


def test_importing_the_agent_runtimes_imports_no_tensorrt_or_cuda() -> None:
    modules = ["nodeagent.runtimes.tensorrt", "nodeagent.runtimes.select", "nodeagent.runtimes"]
    assert imported_along(modules, ["tensorrt", "cuda", "pycuda"]) == []


def test_runtime_choice() -> None:
    assert choose_runtime_kind(tensorrt_is_installed=True, gpu_count=1) is RuntimeKind.TENSORRT
    assert choose_runtime_kind(tensorrt_is_installed=True, gpu_count=0) is RuntimeKind.ONNXRUNTIME_CPU
    assert choose_runtime_kind(tensorrt_is_installed=False, gpu_count=8) is RuntimeKind.ONNXRUNTIME_CPU
    assert create_runtime(RuntimeKind.TENSORRT).kind == "tensorrt"  # constructing imports nothing


def test_this_machine_selects_a_working_runtime() -> None:
    runtime = select_runtime()
    assert runtime.kind in {kind.value for kind in RuntimeKind}


def test_tensorrt_builds_caches_and_runs_minilm(minilm_dir: Path, tmp_path: Path) -> None:
    pytest.importorskip("tensorrt", reason="TensorRT is not installed (GPU extra); live engine test skipped")
    from nodeagent.runtimes.gpu import nvml_gpu_count
    from nodeagent.runtimes.tensorrt import TensorRTRuntime

    if nvml_gpu_count() == 0:
        pytest.skip("no NVIDIA GPU visible")
    options = RuntimeOptions(max_batch=4, max_seq=64, precision="fp32", engine_cache_dir=tmp_path)
    ids = np.array([[101, 7592, 2088, 102]], dtype=np.int64)
    feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}
    reference = OnnxRuntimeCpu()
    reference.load(minilm_dir / "model.onnx", RuntimeOptions())
    first = TensorRTRuntime()
    first.load(minilm_dir / "model.onnx", options)
    assert first.engine_was_built
    np.testing.assert_allclose(
        first.run(feeds)["last_hidden_state"], reference.run(feeds)["last_hidden_state"], atol=0.05
    )
    first.unload()
    second = TensorRTRuntime()
    second.load(minilm_dir / "model.onnx", options)
    assert not second.engine_was_built
    assert second.cache_key == first.cache_key
    second.unload()
