"""Pure planning for TensorRT engines: optimisation profiles and the engine cache key.

No TensorRT import here: this is what nodes without a GPU (and the unit tests) can run.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

from nodeagent.runtimes.base import TensorSpec

PRECISIONS = frozenset({"fp32", "fp16", "bf16", "int8"})
_SHA256_HEX = re.compile(r"^[0-9a-f]{64}$")
_BATCH_NAMES = ("batch", "n", "n_batch", "batch_size")
_SEQUENCE_NAMES = ("seq", "sequence", "seq_len", "sequence_length", "tokens")

Shape = tuple[int, ...]


@dataclass(frozen=True)
class ShapeProfile:
    """min/opt/max shapes of one input inside a TensorRT optimisation profile."""

    input_name: str
    min_shape: Shape
    opt_shape: Shape
    max_shape: Shape


def _axis_role(name: str | None, axis: int) -> str:
    lowered = (name or "").lower()
    if lowered in _BATCH_NAMES or "batch" in lowered:
        return "batch"
    if lowered in _SEQUENCE_NAMES or "seq" in lowered:
        return "sequence"
    # Unnamed dynamic axes follow the [batch, sequence, ...] convention of text encoders.
    return {0: "batch", 1: "sequence"}.get(axis, "unknown")


def derive_profiles(
    input_specs: Sequence[TensorSpec],
    max_batch: int,
    max_seq: int,
    *,
    opt_batch: int | None = None,
    opt_seq: int | None = None,
) -> tuple[ShapeProfile, ...]:
    """One profile entry per input: dynamic batch in 1..max_batch, sequence in 1..max_seq.

    The opt shape is what TensorRT tunes kernels for; by default half the batch bound and the
    smaller of 128 tokens and the sequence bound, which suits short-text serving.
    """
    if max_batch < 1 or max_seq < 1:
        raise ValueError("max_batch and max_seq must be at least 1")
    batch_opt = opt_batch if opt_batch is not None else max(1, max_batch // 2)
    seq_opt = opt_seq if opt_seq is not None else min(max_seq, 128)
    if not (1 <= batch_opt <= max_batch and 1 <= seq_opt <= max_seq):
        raise ValueError("opt shapes must lie within 1..max")
    bounds = {"batch": (1, batch_opt, max_batch), "sequence": (1, seq_opt, max_seq)}
    profiles: list[ShapeProfile] = []
    for spec in input_specs:
        low: list[int] = []
        mid: list[int] = []
        high: list[int] = []
        for axis, dim in enumerate(spec.shape):
            if isinstance(dim, int) and dim >= 0:
                low.append(dim)
                mid.append(dim)
                high.append(dim)
                continue
            role = _axis_role(dim if isinstance(dim, str) else None, axis)
            if role not in bounds:
                raise ValueError(f"input {spec.name!r} axis {axis} ({dim!r}) is neither batch nor sequence")
            lo, opt, hi = bounds[role]
            low.append(lo)
            mid.append(opt)
            high.append(hi)
        profiles.append(ShapeProfile(spec.name, tuple(low), tuple(mid), tuple(high)))
    return tuple(profiles)


def _compute_capability_text(compute_capability: tuple[int, int] | str) -> str:
    if isinstance(compute_capability, str):
        return compute_capability
    major, minor = compute_capability
    return f"{major}.{minor}"


def engine_cache_key(
    onnx_sha256: str,
    tensorrt_version: str,
    compute_capability: tuple[int, int] | str,
    profiles: Sequence[ShapeProfile],
    precision: str,
) -> str:
    """Content key of a serialized engine: an engine is only valid for exactly these inputs.

    Engines are specific to the TensorRT version and the GPU architecture that built them, and
    to the shapes and precision they were built for, so each is part of the key.
    """
    if not _SHA256_HEX.match(onnx_sha256.lower()):
        raise ValueError("onnx_sha256 must be 64 hex digits")
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {sorted(PRECISIONS)}")
    canonical = {
        "onnx_sha256": onnx_sha256.lower(),
        "tensorrt_version": tensorrt_version,
        "compute_capability": _compute_capability_text(compute_capability),
        "profiles": sorted(
            [p.input_name, list(p.min_shape), list(p.opt_shape), list(p.max_shape)] for p in profiles
        ),
        "precision": precision,
    }
    encoded = json.dumps(canonical, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(encoded).hexdigest()


def engine_file_name(cache_key: str) -> str:
    return f"{cache_key}.engine"
