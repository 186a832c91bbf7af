"""The offline embedders: vectors, token counting, and the model file's sha256 check."""

from __future__ import annotations

import json
import math
import shutil

import pytest
from pydantic import ValidationError

from gateway.errors import ConfigError
from gateway.settings import EmbeddingSettings
from rag.chunking import chunk_document
from rag.embeddings import API_BATCH_SIZE, LOCAL_BATCH_SIZE, DenseEmbedder
from rag.model_files import (
    ENCODER_MAX_TOKENS,
    MINILM_DIM,
    MINILM_DIR,
    MINILM_SHA256,
    ModelIntegrityError,
    minilm_onnx_path,
    sha256_file,
)


def test_minilm_onnx_sha256_matches_pin():
    assert sha256_file(minilm_onnx_path()) == MINILM_SHA256


def test_dense_embedder_refuses_tampered_model(tmp_path):
    fake = tmp_path / "model.onnx"
    fake.write_bytes(minilm_onnx_path().read_bytes()[:1024] + b"tampered")
    with pytest.raises(ModelIntegrityError, match="sha256"):
        DenseEmbedder(onnx_path=fake, cache_dir=tmp_path / "cache")


def test_dense_embedder_refuses_missing_model(tmp_path):
    with pytest.raises(ModelIntegrityError, match="not found"):
        DenseEmbedder(onnx_path=tmp_path / "absent.onnx", cache_dir=tmp_path / "cache")


async def test_dense_embedder_vectors_are_unit_and_semantic(dense):
    docs = await dense.aembed_documents(["How to reset your password", "Baking sourdough bread at home"])
    (query,) = await dense.aembed_queries(["I forgot my password"])
    assert len(query) == MINILM_DIM
    assert math.isclose(sum(x * x for x in docs[0]), 1.0, rel_tol=1e-3)
    cos = [sum(a * b for a, b in zip(query, d)) for d in docs]
    assert cos[0] > cos[1] + 0.2


def test_dense_count_tokens_includes_special_tokens(dense):
    assert dense.count_tokens("") == 2
    assert dense.count_tokens("hello world") == 4
    assert dense.max_tokens == ENCODER_MAX_TOKENS


async def test_sparse_embedder_drops_stopwords_and_stems(sparse):
    assert sparse.terms("the running") == sparse.terms("runs")
    (vector,) = await sparse.aembed_documents(["error E-1043 error"])
    assert len(vector.indices) == 3  # error, e, 1043


def test_dense_embedder_keeps_input_order_when_it_batches_by_length(dense):
    # Embedded sorted by length (less padding), returned in the caller's order.
    texts = ["a much longer passage about refunds, invoices and billing cycles " * 3, "refunds", "invoice due date"]
    together = dense.embed_documents(texts)
    one_by_one = [dense.embed_documents([t])[0] for t in texts]
    for a, b in zip(together, one_by_one):
        assert math.isclose(sum(x * y for x, y in zip(a, b)), 1.0, abs_tol=1e-4)
    reversed_queries = dense.embed_queries(texts[::-1])[::-1]
    for a, b in zip(reversed_queries, dense.embed_queries(texts)):
        assert math.isclose(sum(x * y for x, y in zip(a, b)), 1.0, abs_tol=1e-4)


def _fastembed_folder(tmp_path, *, window: int, forget: tuple[str, ...]):
    """A fastembed model folder for `sentence-transformers/all-MiniLM-L6-v2`: the shipped ONNX file,
    with a tokenizer that truncates at `window` and lacks the whole words `forget` (it splits them
    into word pieces, where MiniLM's own tokenizer has one token each)."""
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "model.onnx").symlink_to(minilm_onnx_path())
    for name in ("config.json", "special_tokens_map.json", "tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(MINILM_DIR / name, folder / name)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["model_max_length"] = window
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    tokenizer = json.loads((folder / "tokenizer.json").read_text())
    for word in forget:
        del tokenizer["model"]["vocab"][word]
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer))
    return folder


def test_a_fastembed_model_counts_with_its_own_tokenizer_and_window(tmp_path, dense):
    settings = EmbeddingSettings(
        model="sentence-transformers/all-MiniLM-L6-v2", model_path=str(_fastembed_folder(tmp_path, window=128, forget=("business", "plus", "settings")))
    )
    other = DenseEmbedder.from_settings(settings)

    assert other.max_tokens == 128 and other.dim == MINILM_DIM
    text = "Reset the Business Plus plan from Settings"
    assert other.count_tokens(text) > dense.count_tokens(text)
    assert other.word_pieces("settings") > 1 == dense.word_pieces("settings")
    text = "# Guide\n\n" + "\n\n".join("Business Plus Settings Karpathy. " * 12 for _ in range(20))
    chunks = chunk_document(
        text, fmt="markdown", title="A", bot="b", source="s", doc_id="a.md",
        count_tokens=other.count_tokens, max_tokens=other.max_tokens,
    )
    assert len(chunks) > 1
    windows = [window for chunk in chunks for window in (*chunk.windows, *chunk.sentences)]
    assert max(other.count_tokens(window) for window in windows) <= 128
    assert max(dense.count_tokens(window) for window in windows) < 128  # so MiniLM's count would not have caught it


def test_a_missing_or_broken_model_folder_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="embedding.model_path: .* is not a folder"):
        DenseEmbedder("sentence-transformers/all-MiniLM-L6-v2", model_path=tmp_path / "absent")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="embedding.model_path: cannot load"):
        DenseEmbedder("sentence-transformers/all-MiniLM-L6-v2", model_path=tmp_path / "empty")


def test_a_known_model_with_no_copy_here_is_one_config_error_saying_to_set_model_path(tmp_path, monkeypatch, capfd):
    # No model hub here: fastembed logged two ERROR lines of its own, then the config error said only
    # "Could not load model … from any source".
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("FASTEMBED_CACHE_PATH", str(tmp_path / "empty-cache"))
    with pytest.raises(ConfigError, match="embedding.model: .*from any source.* set embedding.model_path"):
        DenseEmbedder("BAAI/bge-small-en-v1.5")
    assert "ERROR" not in capfd.readouterr().err


def test_model_path_is_refused_for_models_that_have_no_folder():
    with pytest.raises(ValidationError, match="model_path is for a fastembed model"):
        EmbeddingSettings(model="minilm-int8", model_path="/models/x")


def test_batch_size_defaults_to_small_batches_locally_and_larger_requests_for_an_api_model(dense):
    assert dense.batch_size == LOCAL_BATCH_SIZE == 8
    assert DenseEmbedder("litellm/openai/any").batch_size == API_BATCH_SIZE
    assert DenseEmbedder("litellm/openai/any", batch_size=16).batch_size == 16
    with pytest.raises(ValidationError):
        EmbeddingSettings(batch_size=0)
