"""How long an HTML page takes to become Markdown at ingest (`rag.html_text.html_to_markdown`).

    .venv/bin/python -m bench.html_pages DIR [--limit 200] [--repeat 3]

Every `*.html` under DIR (sorted, the first `--limit`) is read once, then converted `--repeat` times
over; each pass is timed whole. Printed: pages, their mean size, ms per page for each pass and the
best, and for comparison the same pages through `trafilatura.extract_metadata`, the call the title
used to come from (its date search is most of its cost).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from bench.retrieval import machine
from rag.html_text import html_to_markdown


def _ms_per_page(convert, pages: list[str]) -> float:
    started = time.perf_counter()
    for page in pages:
        convert(page)
    return (time.perf_counter() - started) / len(pages) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", type=Path)
    parser.add_argument("--limit", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    import trafilatura

    files = sorted(args.dir.rglob("*.html"))[: args.limit]
    if not files:
        raise SystemExit(f"no .html files under {args.dir}")
    pages = [f.read_text(errors="replace") for f in files]
    html_to_markdown(pages[0])  # imports and trafilatura's caches, outside the timing
    print(machine())
    print(f"{len(pages)} pages under {args.dir}, mean {sum(map(len, pages)) // len(pages):,} characters")
    passes = [_ms_per_page(html_to_markdown, pages) for _ in range(args.repeat)]
    print("html_to_markdown: " + ", ".join(f"{p:.1f}" for p in passes) + f" ms/page (best {min(passes):.1f})")
    metadata = _ms_per_page(trafilatura.extract_metadata, pages)
    print(f"trafilatura.extract_metadata alone (one pass): {metadata:.1f} ms/page")


if __name__ == "__main__":
    main()
