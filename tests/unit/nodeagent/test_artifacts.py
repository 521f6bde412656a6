from __future__ import annotations

import json
import pickle
import zipfile
from pathlib import Path

import pytest

from artifacts.hashing import sha256_of_file
from artifacts.manifest import (
    RISK_PICKLE_PRESENT,
    RISK_REMOTE_CODE_REQUIRED,
    ArtifactFormat,
    ArtifactManifest,
    ManifestFile,
    build_manifest,
)
from artifacts.paths import resolve_artifact_path
from artifacts.verify import verify_artifact_set
from streams.codes import ServingError


def _safetensors_bytes() -> bytes:
    header = b'{"__metadata__":{}}'
    return len(header).to_bytes(8, "little") + header


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    root = tmp_path / "model"
    (root / "sub").mkdir(parents=True)
    (root / "model.onnx").write_bytes(b"\x08\x07" + bytes(range(256)) * 8)
    (root / "tokenizer.json").write_text(json.dumps({"model": {"type": "WordPiece"}, "added_tokens": []}))
    (root / "config.json").write_text(json.dumps({"hidden_size": 384}))
    (root / "sub" / "weights.safetensors").write_bytes(_safetensors_bytes())
    (root / "README.md").write_text("hello")
    return root


def test_manifest_lists_relative_paths_hashes_sizes_and_formats(model_dir: Path) -> None:
    manifest = build_manifest(model_dir)
    formats = {entry.path: entry.format for entry in manifest.files}
    assert formats == {
        "README.md": ArtifactFormat.OTHER,
        "config.json": ArtifactFormat.JSON_CONFIG,
        "model.onnx": ArtifactFormat.ONNX,
        "sub/weights.safetensors": ArtifactFormat.SAFETENSORS,
        "tokenizer.json": ArtifactFormat.TOKENIZER_JSON,
    }
    onnx_entry = manifest.file("model.onnx")
    assert (onnx_entry.sha256, onnx_entry.size_bytes) == sha256_of_file(model_dir / "model.onnx")
    assert manifest.risk_flags == ()


def test_manifest_round_trips_through_dict(model_dir: Path) -> None:
    manifest = build_manifest(model_dir)
    assert ArtifactManifest.from_dict(json.loads(json.dumps(manifest.to_dict()))) == manifest


def test_untampered_set_verifies(model_dir: Path) -> None:
    manifest = build_manifest(model_dir)
    verified = verify_artifact_set(model_dir, manifest)
    assert verified.bytes_verified == manifest.total_bytes
    assert verified.path_of("sub/weights.safetensors").is_file()


def test_one_changed_byte_is_not_verified(model_dir: Path) -> None:
    manifest = build_manifest(model_dir)
    target = model_dir / "model.onnx"
    data = bytearray(target.read_bytes())
    data[100] ^= 0x01
    target.write_bytes(bytes(data))
    with pytest.raises(ServingError) as raised:
        verify_artifact_set(model_dir, manifest)
    assert raised.value.code == "ARTIFACT_NOT_VERIFIED"
    assert raised.value.param == "model.onnx"
    assert "sha256" in raised.value.message


def test_size_change_and_missing_file_are_not_verified(model_dir: Path) -> None:
    manifest = build_manifest(model_dir)
    (model_dir / "README.md").write_text("hello!")
    with pytest.raises(ServingError, match="size") as raised:
        verify_artifact_set(model_dir, manifest)
    assert raised.value.code == "ARTIFACT_NOT_VERIFIED"
    (model_dir / "README.md").unlink()
    with pytest.raises(ServingError, match="missing") as raised:
        verify_artifact_set(model_dir, manifest)
    assert raised.value.code == "ARTIFACT_NOT_VERIFIED"


@pytest.mark.parametrize(
    "bad_path", ["/etc/passwd", "../outside.txt", "sub/../../outside.txt", "..", "C:/x", "sub\\..\\x", ""]
)
def test_escaping_paths_are_refused(model_dir: Path, bad_path: str) -> None:
    with pytest.raises(ServingError) as raised:
        resolve_artifact_path(model_dir, bad_path)
    assert raised.value.code == "ARTIFACT_PATH_INVALID"


def test_symlink_out_of_root_is_refused(model_dir: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("not yours")
    (model_dir / "link.txt").symlink_to(secret)
    (model_dir / "linkdir").symlink_to(tmp_path)
    for path in ("link.txt", "linkdir/secret.txt"):
        with pytest.raises(ServingError) as raised:
            resolve_artifact_path(model_dir, path)
        assert raised.value.code == "ARTIFACT_PATH_INVALID"
    with pytest.raises(ServingError) as raised:
        build_manifest(model_dir)
    assert raised.value.code == "ARTIFACT_PATH_INVALID"


def test_manifest_naming_an_escaping_symlink_is_refused_by_verify(model_dir: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("not yours")
    sha256, size = sha256_of_file(secret)
    (model_dir / "link.txt").symlink_to(secret)
    manifest = ArtifactManifest((ManifestFile("link.txt", sha256, size, ArtifactFormat.OTHER),), ())
    with pytest.raises(ServingError) as raised:
        verify_artifact_set(model_dir, manifest)
    assert raised.value.code == "ARTIFACT_PATH_INVALID"


def test_symlink_inside_root_is_allowed(model_dir: Path) -> None:
    (model_dir / "alias.onnx").symlink_to(model_dir / "model.onnx")
    assert resolve_artifact_path(model_dir, "alias.onnx") == (model_dir / "model.onnx").resolve()


def test_pickle_is_flagged_and_refused(model_dir: Path) -> None:
    (model_dir / "pytorch_model.bin").write_bytes(pickle.dumps({"w": [1.0, 2.0]}, protocol=4))
    manifest = build_manifest(model_dir)
    assert manifest.file("pytorch_model.bin").format is ArtifactFormat.PICKLE
    assert RISK_PICKLE_PRESENT in manifest.risk_flags
    with pytest.raises(ServingError) as raised:
        verify_artifact_set(model_dir, manifest)
    assert raised.value.code == "PICKLE_PRESENT"
    assert verify_artifact_set(model_dir, manifest, allow_pickle=True).bytes_verified == manifest.total_bytes


def test_pickle_is_refused_even_when_the_manifest_hides_it(model_dir: Path) -> None:
    path = model_dir / "model.pt"
    with zipfile.ZipFile(path, "w") as archive:  # torch.save's zip layout
        archive.writestr("archive/data.pkl", pickle.dumps([1, 2, 3]))
    honest = build_manifest(model_dir)
    disguised = ArtifactManifest(
        tuple(
            ManifestFile(f.path, f.sha256, f.size_bytes, ArtifactFormat.OTHER) if f.path == "model.pt" else f
            for f in honest.files
        ),
        risk_flags=(),
    )
    with pytest.raises(ServingError) as raised:
        verify_artifact_set(model_dir, disguised)
    assert raised.value.code == "PICKLE_PRESENT"


def test_bin_without_pickle_magic_is_not_pickle(model_dir: Path) -> None:
    (model_dir / "vectors.bin").write_bytes(b"\x00\x01\x02\x03" * 10)
    assert build_manifest(model_dir).file("vectors.bin").format is ArtifactFormat.OTHER


@pytest.mark.parametrize(
    ("name", "content"),
    [
        ("config.json", json.dumps({"auto_map": {"AutoModel": "modeling_x.XModel"}})),
        ("config.json", json.dumps({"trust_remote_code": True})),
        ("modeling_x.py", "import os\n"),
    ],
)
def test_remote_code_is_flagged_and_refused(model_dir: Path, name: str, content: str) -> None:
    (model_dir / name).write_text(content)
    manifest = build_manifest(model_dir)
    assert RISK_REMOTE_CODE_REQUIRED in manifest.risk_flags
    with pytest.raises(ServingError) as raised:
        verify_artifact_set(model_dir, manifest)
    assert raised.value.code == "REMOTE_CODE_REQUIRED"
    assert verify_artifact_set(model_dir, manifest, allow_remote_code=True)


def test_empty_manifest_is_not_verified(model_dir: Path) -> None:
    with pytest.raises(ServingError) as raised:
        verify_artifact_set(model_dir, ArtifactManifest((), ()))
    assert raised.value.code == "ARTIFACT_NOT_VERIFIED"


def test_pulled_minilm_verifies(minilm_dir: Path) -> None:
    manifest = build_manifest(minilm_dir)
    assert {f.path: f.format for f in manifest.files} == {
        "model.onnx": ArtifactFormat.ONNX,
        "serving_config.json": ArtifactFormat.JSON_CONFIG,
        "tokenizer.json": ArtifactFormat.TOKENIZER_JSON,
    }
    assert verify_artifact_set(minilm_dir, manifest).bytes_verified > 20_000_000
