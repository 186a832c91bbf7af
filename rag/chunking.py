"""Structure-aware chunking: split on the document's own blocks, pack them to a token budget.

Rules (each has a test in tests/rag/test_chunking.py):
- Markdown (and HTML and PDF, which arrive as Markdown: `rag.sources`, `rag.pdf`) is parsed with
  markdown-it-py into blocks: paragraphs, list items, fenced or indented code, tables, block quotes.
  Plain text is split into paragraphs at blank lines (`rag.blocks`).
- Blocks are packed in order up to `text_tokens` (heading path + content, special tokens
  included), counted with the embedder's own tokenizer. The chunk's `text` (what a hit returns and
  what BM25 indexes) may be longer than the encoder's `max_tokens`; its `embed_text` (what the dense
  encoder sees) is the heading path plus the start of the text cut at a word boundary to fit
  `max_tokens`, so no embedded text is ever truncated by the encoder. The rest of the text is cut
  into further windows (`embed_windows`, each heading path + piece, each within `max_tokens`);
  ingest embeds every window and stores their token-weighted mean as the chunk's one dense vector.
  Why: a multi-sentence answer split across two small chunks is found by neither; BM25 has no
  length limit and indexes it all (`sparse_text`).
- A heading change always starts a new chunk, and each chunk carries its heading path. The
  document title is the root of the path unless the document has its own level-1 heading.
- Overlap: a new chunk in the same section may repeat the previous chunk's last block, if that
  block is small (at most a quarter of the budget). Never across a heading.
- A block that alone exceeds the budget is split: prose at sentence ends (then words), code at
  line ends with each piece re-wrapped in its own complete fence, tables between rows with the
  header repeated; a list item or quote holding a fence or a table is first cut at those. So no chunk
  ever holds half a code fence or half a table row, however deeply it is nested (`rag.splitting`).
- HTML comments and base64 `data:` URIs are dropped from prose (`rag.blocks`): an editor's note
  must not reach users, and an inlined image carries no words.
- Chunk ids are uuid5 of bot, source, document, heading path and content: re-ingesting the same
  content gives the same ids.
- Each chunk also lists its `sentences` (`split_sentences`): sentence ends, list items, lines and
  table rows (read with their header, `rag.tables`), each of at least `MIN_SENTENCE_WORDS` words and
  within `max_tokens`. Ingest embeds each one; search reads the best sentence's cosine as a ranking
  prior (`rag.search`).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from rag.blocks import Block, heading_texts, markdown_sections, paragraph_blocks
from rag.splitting import merge, split_block, split_words
from rag.tables import text_and_tables

CHUNK_NAMESPACE = uuid.UUID("6f6c1a52-3c1e-4d44-9b1f-2a7e5d0c9e11")
_SENTENCE_BREAK = re.compile(r"(?<=[.!?:])\s+(?=[A-Z0-9])|\n+")
_SOFT_WRAP = re.compile(r"(?<![.!?:\n])[ \t]*\n(?![ \t]*(?:[-*+>|#]|\d+[.)]|\n))[ \t]*")
"""A line break inside a paragraph (hard-wrapped text): not after a sentence end, not before a
blank line, list item, quote, table row or heading."""
MIN_SENTENCE_WORDS = 3
MAX_CHARS_PER_TOKEN = 12
"""The length floor of a token count (`_remembered`): a 512-token chunk holds at most ~6,100 characters."""
MAX_SENTENCES = 64
"""Per chunk; past it, neighbouring sentences are joined in pairs (a ≤512-token chunk rarely has 40)."""
_MARKDOWN_FORMATS = {"markdown", "html", "pdf"}  # HTML and PDF are loaded as Markdown (rag.sources)

TokenCounter = Callable[[str], int]


@dataclass(frozen=True)
class Chunk:
    """One retrievable unit. `embed_text` (heading path + start of text, within the encoder limit)
    is what the dense encoder sees; `sparse_text` (heading path + all of text) what BM25 indexes."""

    chunk_id: str
    text: str
    heading_path: tuple[str, ...]
    embed_text: str
    position: int
    sparse_text: str = ""
    embed_windows: tuple[str, ...] = ()
    sentences: tuple[str, ...] = ()

    @property
    def windows(self) -> tuple[str, ...]:
        """Every text the dense encoder sees for this chunk (each within its limit)."""
        return self.embed_windows or (self.embed_text,)


def chunk_document(
    text: str,
    *,
    fmt: str,
    title: str,
    bot: str,
    source: str,
    doc_id: str,
    count_tokens: TokenCounter,
    max_tokens: int = 256,
    text_tokens: int | None = None,
    overlap: bool = True,
) -> list[Chunk]:
    """Split one document into chunks of up to `text_tokens` (default `max_tokens`) whose embedded
    text never exceeds `max_tokens`."""
    text_tokens = max(text_tokens or max_tokens, max_tokens)
    count_tokens = _remembered(count_tokens)
    if fmt in _MARKDOWN_FORMATS:
        sections = markdown_sections(text)
    else:
        sections = [((), paragraph_blocks(text))]
    chunks: list[Chunk] = []
    seen: dict[str, int] = {}
    for headings, blocks in sections:
        path = headings if headings and headings[0][0] == 1 else ((1, title),) + headings if title else headings
        heading_path = tuple(h for _, h in path)
        prefix = " > ".join(heading_path)
        if prefix and count_tokens(prefix) > max_tokens // 2:
            # A pathological heading path would starve the content: embed only its last part.
            prefix = split_words(prefix, budget=max_tokens // 4, size=count_tokens)[0]
        for body in _pack(blocks, prefix=prefix, count_tokens=count_tokens, max_tokens=text_tokens, overlap=overlap):
            key = "\x1f".join((bot, source, doc_id, prefix, body))
            seen[key] = seen.get(key, 0) + 1
            chunk_id = str(uuid.uuid5(CHUNK_NAMESPACE, f"{key}\x1f{seen[key]}"))
            sparse_text = f"{prefix}\n\n{body}" if prefix else body
            embed_text, windows = sparse_text, ()
            if text_tokens > max_tokens and count_tokens(embed_text) > max_tokens:
                head = _fit_head(body, prefix=prefix, count_tokens=count_tokens, max_tokens=max_tokens)
                embed_text = f"{prefix}\n\n{head}" if prefix else head
                overhead = count_tokens("")
                budget = max(max_tokens - (count_tokens(prefix) if prefix else overhead), 1)
                tail = split_words(body[len(head) :], budget=budget, size=lambda p: count_tokens(p) - overhead)
                windows = (embed_text, *(f"{prefix}\n\n{t}" if prefix else t for t in tail if t.strip()))
            sentences = split_sentences(body, count_tokens=count_tokens, max_tokens=max_tokens)
            chunks.append(Chunk(chunk_id, body, heading_path, embed_text, len(chunks), sparse_text, windows, sentences))
    if not chunks and fmt in _MARKDOWN_FORMATS and (outline := "\n".join(dict.fromkeys(heading_texts(text)))):
        # Headings and nothing else ("# Contact" / "## Phone: 555-0100"): the headings are the content.
        # Such a page gave no chunk at all, and vanished from the knowledge base without an error.
        return chunk_document(outline, fmt="text", title=title, bot=bot, source=source, doc_id=doc_id,
                              count_tokens=count_tokens, max_tokens=max_tokens, text_tokens=text_tokens,
                              overlap=overlap)
    return chunks


def _remembered(count_tokens: TokenCounter) -> TokenCounter:
    """`count_tokens` with its answers kept for one document: the word splitter and the sentence pass
    count the same words and pieces again and again (136k calls for 28k distinct strings on STICI).

    A text also counts as at least one token per `MAX_CHARS_PER_TOKEN` characters. Why: WordPiece
    reads a word over 100 characters, or a word in a script its vocabulary lacks, as one `[UNK]`, so
    a 100,000-character word or a page of Thai fitted a 512-token budget whole, and the answer step
    was handed the whole of it. No chunk of the two benchmark corpora comes near the floor (at most
    7.2 characters per token), and their chunks are byte-identical with it."""
    counts: dict[str, int] = {}

    def count(text: str) -> int:
        if (n := counts.get(text)) is None:
            n = counts[text] = max(count_tokens(text), -(-len(text) // MAX_CHARS_PER_TOKEN))
        return n

    return count


def split_sentences(text: str, *, count_tokens: TokenCounter, max_tokens: int) -> tuple[str, ...]:
    """The chunk text's sentences, list items and lines, for sentence-level matching.

    Pieces under `MIN_SENTENCE_WORDS` words are dropped (a lone label such as "Note:" is close to
    everything), longer ones are cut to fit the encoder, and past `MAX_SENTENCES` neighbours are
    packed together up to the encoder limit. A text with no such piece gives itself, cut to fit."""
    overhead = count_tokens("")
    budget = max(max_tokens - overhead, 1)

    def size(piece: str) -> int:
        return count_tokens(piece) - overhead

    pieces: list[str] = []
    for part in _sentence_parts(text):
        part = " ".join(part.split())
        if len(part.split()) >= MIN_SENTENCE_WORDS:
            pieces += [part] if size(part) <= budget else split_words(part, budget=budget, size=size)
    if not pieces and text.strip():
        pieces = split_words(" ".join(text.split()), budget=budget, size=size)
    if len(pieces) > MAX_SENTENCES:
        pieces = merge(pieces, budget=budget, size=size, sep=" ")
    return tuple(pieces[:MAX_SENTENCES])


def _sentence_parts(text: str) -> list[str]:
    """The text cut at sentence ends and line breaks, with each table row one part, read with its
    header ("Largest attachment; Free: 25 MB; Plus: 250 MB"): its colons end no sentence."""
    parts: list[str] = []
    for segment in text_and_tables(_SOFT_WRAP.sub(" ", text)):
        parts += segment if isinstance(segment, list) else _SENTENCE_BREAK.split(segment)
    return parts


def _fit_head(body: str, *, prefix: str, count_tokens: TokenCounter, max_tokens: int) -> str:
    """The longest start of `body` cut at whitespace that fits the encoder with the prefix."""

    def fits(piece: str) -> bool:
        return count_tokens(f"{prefix}\n\n{piece}" if prefix else piece) <= max_tokens

    cuts = [m.start() for m in re.finditer(r"\s+", body)] + [len(body)]
    if not fits(body[: cuts[0]]):
        # A first word longer than the whole budget: fall back to the word splitter.
        budget = max_tokens - (count_tokens(prefix) if prefix else count_tokens(""))
        return split_words(body, budget=max(budget, 1), size=lambda p: count_tokens(p) - count_tokens(""))[0]
    # Summed word counts say where the cut falls for a word-piece encoder (no piece spans a space);
    # two exact counts confirm it. Binary search over whole prefixes counted 3.5M characters for
    # STICI's 403 chunks; it stays the answer for an encoder whose counts do not add up.
    guess = _last_cut_by_words(body, cuts, prefix=prefix, count_tokens=count_tokens, max_tokens=max_tokens)
    if fits(body[: cuts[guess]]) and (guess == len(cuts) - 1 or not fits(body[: cuts[guess + 1]])):
        return body[: cuts[guess]].rstrip()
    lo, hi = 0, len(cuts) - 1  # binary search for the last cut that fits
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(body[: cuts[mid]]):
            lo = mid
        else:
            hi = mid - 1
    return body[: cuts[lo]].rstrip()


def _last_cut_by_words(body: str, cuts: list[int], *, prefix: str, count_tokens: TokenCounter, max_tokens: int) -> int:
    """The index of the last cut whose start of `body` fits, by summing per-word counts."""
    overhead = count_tokens("")
    used = count_tokens(prefix) if prefix else overhead
    words = iter(re.finditer(r"\S+", body))
    word = next(words, None)
    last = 0
    for index, cut in enumerate(cuts):
        while word is not None and word.end() <= cut:
            used += count_tokens(word.group()) - overhead
            word = next(words, None)
        if used > max_tokens:
            break
        last = index
    return last


def _pack(
    blocks: list[Block], *, prefix: str, count_tokens: TokenCounter, max_tokens: int, overlap: bool
) -> list[str]:
    """Greedy packing of one section's blocks into chunk bodies within the token budget."""
    overhead = count_tokens("")  # special tokens, e.g. [CLS] and [SEP]
    # count_tokens(prefix) already includes the special tokens once.
    budget = max_tokens - (count_tokens(prefix) if prefix else overhead)

    def size(piece: str) -> int:
        return count_tokens(piece) - overhead

    pieces: list[tuple[str, int]] = []
    for block in blocks:
        n = size(block.text)
        if n <= budget:
            pieces.append((block.text, n))
        else:
            pieces.extend((p, size(p)) for p in split_block(block, budget=budget, size=size))

    bodies: list[str] = []
    current: list[tuple[str, int]] = []
    used = 0
    for piece, n in pieces:
        if current and used + n > budget:
            bodies.append("\n\n".join(p for p, _ in current))
            last_text, last_n = current[-1]
            carry = overlap and last_n <= budget // 4 and last_n + n <= budget
            current, used = ([(last_text, last_n)], last_n) if carry else ([], 0)
        current.append((piece, n))
        used += n
    if current:
        bodies.append("\n\n".join(p for p, _ in current))
    return bodies
