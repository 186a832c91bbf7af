"""How often the offline extractive responder (the model `make run` answers with) quotes the answer.

    HF_HUB_OFFLINE=1 LITELLM_LOCAL_MODEL_COST_MAP=True .venv/bin/python -m bench.responder [--sets s10 stici help_center help_center_holdout] [--json FILE]

Per set: the documents are ingested by `rag.ingest.Ingestor` into a temporary local-mode index, and each
answerable question goes through `HybridSearch` (the bot defaults, k=5), `build_messages` and
`gateway.offline.extractive.answer`, as in the pipeline. An answer "quotes the gold" when it holds a run of six
words of a gold text (the whole gold text when shorter), markers and case aside: the gold texts are spans of
the right chunk, and a quoted sentence that answers usually shares six words with them. It "cites a chunk
holding one" when a chunk its markers point to holds a gold text: drawn from the right place, though the
gold span may be the chunk's opening rather than the answer ("Pitch: Set the pitch of the speech" against
"configure your text-to-speech (tts) options"). `fallback` = the
fallback text (gate 1 refused, or no sentence carried enough of the question). Deterministic: one run.

`help_center` is the demo's own knowledge base (`examples/help-center`), answered as `make run` answers: with
the `acme` bot of `config.yaml`, whose instructions name its product (words the responder then discounts). `help_center_holdout` asks the same
knowledge base 45 other questions (`data/SOURCES.md`), kept to check a change to the responder that was made
while reading the answers to `help_center`.
"""

from __future__ import annotations

import argparse
import asyncio
import json

from bench.data import HELP_CENTER, set_files
from bench.retrieval import machine, scratch
from gateway.offline.extractive import answer
from gateway.pipeline.citations import strip_invalid_markers
from gateway.pipeline.prompts import build_messages
from gateway.settings import BotSettings, EmbeddingSettings, load_settings
from rag.embeddings import DenseEmbedder, SparseEmbedder
from rag.eval import first_hit_rank, load_questions, plain
from rag.ingest_setup import ingestor_for
from rag.search import HybridSearch
from rag.sources import load_directory

RUN = 6
BOT = BotSettings(name="bench", fallback_text="FALLBACK")
def _bot(name: str) -> BotSettings:
    """The bot a set is answered by: the demo's own for its help center, else a bare one."""
    if not name.startswith("help_center"):
        return BOT
    demo = next(b for b in load_settings(HELP_CENTER.parent.parent / "config.yaml").bots if b.name == "acme")
    return demo.model_copy(update={"fallback_text": BOT.fallback_text})


def quotes(answer_text: str, gold: str) -> bool:
    """True when the answer holds a run of `RUN` words of the gold text (all of it when shorter), markup
    left out of both: the answer quotes "iOS 16", its source says "**iOS 16**"."""
    said = plain(strip_invalid_markers(answer_text, count=0)[0])
    words = plain(gold).split()
    runs = [words] if len(words) <= RUN else [words[i : i + RUN] for i in range(len(words) - RUN + 1)]
    return any(" ".join(run) in said for run in runs)


def cites_gold_chunk(answer_text: str, hits, golds) -> bool:
    """True when a chunk the answer cites holds a gold text: the answer was drawn from the right place,
    whether or not it quotes the gold span itself (a gold text often marks the chunk by its opening)."""
    _, cited = strip_invalid_markers(answer_text, count=len(hits))
    return first_hit_rank([hits[n - 1] for n in cited], golds) is not None  # the eval's own hit rule


async def run(sets: list[str]) -> dict:
    """One row per set: answerable questions, answers that quote a gold text, fallbacks."""
    dense, sparse = DenseEmbedder(), SparseEmbedder()
    rows, answers = [], {}
    async with scratch("bench-responder-") as work:
        for name in sets:
            docs_dir, questions_file = set_files(name)
            docs = (await load_directory(docs_dir)).documents
            bot = _bot(name)
            ingestor = ingestor_for(EmbeddingSettings(), work.index, dense, sparse, work.sessions)
            await ingestor.ingest_documents(name, "bench", docs)
            search = HybridSearch(work.index, dense, sparse)
            questions = [q for q in load_questions(questions_file) if q.answerable]
            answers[name] = []
            for q in questions:
                found = await search.search(name, [q.question], bot.retrieval)
                text = answer(build_messages(bot, history=[], user_text=q.question, hits=list(found.hits)))
                answers[name].append({"question": q.question, "answer": text,
                                      "quotes_gold": any(quotes(text, g) for g in q.gold_texts),
                                      "cites_gold_chunk": cites_gold_chunk(text, found.hits, q.gold_texts)})
            rows.append({"set": name, "answerable": len(questions),
                         "quotes_gold": sum(a["quotes_gold"] for a in answers[name]),
                         "cites_gold_chunk": sum(a["cites_gold_chunk"] for a in answers[name]),
                         "fallback": sum(a["answer"] == bot.fallback_text for a in answers[name])})
    return {"machine": machine(), "rows": rows, "answers": answers}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", nargs="+", default=["s10", "stici", "help_center", "help_center_holdout"])
    parser.add_argument("--json", help="also write every answer to this file")
    args = parser.parse_args()
    result = asyncio.run(run(args.sets))
    info = result["machine"]
    print(f"{info['date']}, {info['cpu']}, {info['nproc']} CPUs, Python {info['python']}")
    print("| set | answerable | answer quotes a gold text | answer cites a chunk holding one | fallback |\n"
          "|---|---|---|---|---|")
    for row in result["rows"]:
        n = row["answerable"]
        print(f"| {row['set']} | {n} | {row['quotes_gold']} ({row['quotes_gold'] / n:.0%}) | "
              f"{row['cites_gold_chunk']} ({row['cites_gold_chunk'] / n:.0%}) | {row['fallback']} |")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(result, out, indent=1)


if __name__ == "__main__":
    main()
