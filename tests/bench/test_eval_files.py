"""Sanity of the shipped eval sets (bench/data), the baseline chunkers, and `gateway eval` on a tiny set."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from bench.data import SETS as BENCH_SETS
from bench.recipes import pack_paragraphs, split_headings, windows
from rag.eval import normalize

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "bench" / "data"
SETS = tuple(BENCH_SETS)
CONTRACT_KEYS = {
    "recall@1", "recall@3", "recall@5", "recall@10", "mrr",
    "refusal_rate", "false_refusal_rate", "n_answerable", "n_unanswerable",
}


def _rows(name: str) -> list[dict]:
    return [json.loads(line) for line in BENCH_SETS[name][1].read_text(encoding="utf-8").splitlines() if line.strip()]


def _corpus(name: str) -> str:
    return normalize("\n".join(p.read_text(encoding="utf-8") for p in sorted(BENCH_SETS[name][0].glob("*.md"))))


@pytest.mark.parametrize("name", SETS)
def test_eval_file_lines_follow_the_contract(name: str) -> None:
    for row in _rows(name):
        assert isinstance(row["question"], str) and row["question"].strip()
        if row.get("answerable") is False:
            assert set(row) == {"question", "answerable"}
        else:
            assert set(row) == {"question", "gold_texts"}
            assert row["gold_texts"] and all(isinstance(g, str) and g.strip() for g in row["gold_texts"])


@pytest.mark.parametrize("name", SETS)
def test_eval_file_gold_texts_occur_in_the_corpus(name: str) -> None:
    corpus = _corpus(name)
    missing = [g for row in _rows(name) for g in row.get("gold_texts", []) if normalize(g) not in corpus]
    assert missing == []


def test_eval_file_sizes_match_the_fixtures() -> None:
    s10, stici = _rows("s10"), _rows("stici")
    assert len(s10) == 50 and all("gold_texts" in r for r in s10)
    assert sum(r.get("answerable") is False for r in stici) == 40
    assert sum("gold_texts" in r for r in stici) == 79  # 40 + 40 minus one whose answer the document lacks
    assert len({r["question"] for r in s10}) >= 49
    help_center = _rows("help_center")
    assert sum("gold_texts" in r for r in help_center) == 60 and sum(r.get("answerable") is False for r in help_center) == 25
    holdout = _rows("help_center_holdout")
    assert len(holdout) == 45 and all("gold_texts" in r for r in holdout)
    assert not {r["question"] for r in holdout} & {r["question"] for r in help_center}
    smart_tv = _rows("smart_tv")
    assert sum("gold_texts" in r for r in smart_tv) == 50 and sum(r.get("answerable") is False for r in smart_tv) == 15


def test_smart_tv_gold_texts_each_name_one_section() -> None:
    """The manual repeats some sections word for word; a gold text found in two would credit either."""
    pages = [normalize(p.read_text(encoding="utf-8")) for p in sorted(BENCH_SETS["smart_tv"][0].glob("*.md"))]
    ambiguous = [g for row in _rows("smart_tv") for g in row.get("gold_texts", [])
                 if sum(normalize(g) in page for page in pages) != 1]
    assert ambiguous == []


def test_recipes_windows_stay_near_size_and_overlap() -> None:
    text = " ".join(f"word{i}" for i in range(600))
    parts = windows(text, size=1000, overlap=200)
    assert all(len(p) <= 1000 for p in parts)
    assert len(parts) > 4
    for a, b in zip(parts, parts[1:]):
        assert b.split()[0] in a  # the next window starts inside the previous one
    assert normalize(" ".join(parts)).count("word599") >= 1


def test_recipes_pack_paragraphs_packs_to_budget_with_overlap() -> None:
    paras = [f"Paragraph {i} " + "x" * 300 for i in range(10)]
    chunks = pack_paragraphs("\n\n".join(paras), size=1200, overlap=200)
    assert 3 <= len(chunks) <= 6
    assert all(len(c) <= 1200 + 200 + 2 for c in chunks)
    assert all(any(f"Paragraph {i} " in c for c in chunks) for i in range(10))


def test_recipes_split_headings_cuts_only_at_level_one_and_two() -> None:
    text = "# A\n\nintro\n\n## B\n\nbody\n\n### C\n\ndeep\n\n## D\n\nend"
    sections = split_headings(text)
    assert [s.splitlines()[0] for s in sections] == ["# A", "## B", "## D"]
    assert "### C" in sections[1]


def test_gateway_eval_cli_prints_contract_keys_on_a_tiny_set(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from gateway.cli import main

    docs = tmp_path / "docs"
    docs.mkdir()
    shutil.copy(DATA / "stici" / "docs" / "doc-01.md", docs / "doc-01.md")
    corpus = normalize((docs / "doc-01.md").read_text(encoding="utf-8"))
    rows = [r for r in _rows("stici") if r.get("gold_texts") and all(normalize(g) in corpus for g in r["gold_texts"])]
    rows += [r for r in _rows("stici") if r.get("answerable") is False][:2]
    questions = tmp_path / "questions.jsonl"
    questions.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")

    code = main(["eval", "--docs", str(docs), "--questions", str(questions), "--k", "10", "--json"])

    assert code == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert CONTRACT_KEYS <= set(result)
    assert result["n_unanswerable"] == 2
    assert result["n_answerable"] == len(rows) - 2 >= 2
    # The document is only a handful of chunks, so every gold text is within the top 10.
    assert result["recall@10"] == 1.0
