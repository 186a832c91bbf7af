"""The knowledge base: load sources, chunk by structure, embed (dense + BM25), index in Qdrant,
search with a relevance gate, ingest incrementally, and evaluate retrieval.

    sources.py     directory / urls / sitemap  → Document (HTML and PDF as Markdown)
    html_text.py   a page's main text as Markdown (trafilatura), and its title
    crawl.py       robots.txt (RFC 9309), bounded fetches, the crawl's pace, what a failed fetch says
    sitemap.py     a sitemap's pages (XML, gzip, plain text; indexes followed)
    decoding.py    bytes → text: BOM, declared charset, UTF-8, a legacy charset; binary refused
    pdf.py         a PDF's headings and paragraphs from its layout (font sizes, line gaps)
    chunking.py    Document                    → Chunk (heading path, token budget, stable id)
    blocks.py      a document's blocks: headings, paragraphs, list items, code fences, tables
    splitting.py   one block over the token budget → pieces that fit (lines, sentences, words)
    tables.py      Markdown table rows read with their header ("Label; Header: cell"), for sentences
    embeddings.py  DenseEmbedder (MiniLM int8 offline, fastembed, litellm/) and SparseEmbedder (BM25)
    model_files.py  the model folders in models/, and MiniLM's ONNX file checked against its pinned sha256
    knowledge_index.py  what both engines share: ChunkPayload, IndexPoint, ArmResults, KnowledgeIndex, rrf
    index.py       QdrantIndex (Qdrant local mode or server): one collection per bot, named vectors
                   "dense" and "bm25"; open_index(settings) picks the engine
    local_sparse.py  local mode's BM25 scoring by term lookups (same scores, 10× faster)
    edge_index.py  EdgeIndex: the same on qdrant-edge, one shard per bot (`qdrant.engine: edge`)
    search.py      HybridSearch.search(bot, queries, retrieval) → SearchResult (gate 1)
    gate.py        gate 1: best dense cosine, lexical coverage, keyword and unknown-word overrides
    framing.py     words that frame a question rather than name its subject ("mentioned", "compare")
    query_words.py a query's literal words (codes, names, acronyms) and their parts
    ingest.py      Ingestor.ingest_bot / ingest_source → IngestReport (counts in chunks)
    ingest_progress.py  how far a run is, in documents, for a progress bar (`gateway ingest`, admin stream)
    fingerprint.py a document's content hash and the chunk settings it includes (CHUNKER_VERSION)
    index_check.py is the index what the store records? chunks it lacks, and an older copy's leftovers
    points.py      chunks → IndexPoints (window vectors averaged, sentence vectors, BM25)
    ingest_runs.py IngestReport, and each run recorded in the store
    document_rows.py  DocumentRows: a source's rows in the store (key, cleaned text, URL, validators, settings)
    eval.py        evaluate(docs_dir, questions_path) → recall@k, MRR, refusal rates, per-question outcomes
    term_stats.py  BM25 document frequencies per bot: the idf behind lexical coverage (gate 1, ranking)
"""
