"""The offline embedders: vectors, token counting, and the model file's sha256 check."""

from __future__ import annotations

import math

import pytest

from rag.embeddings import (
    ENCODER_MAX_TOKENS,
    MINILM_DIM,
    MINILM_SHA256,
    DenseEmbedder,
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
