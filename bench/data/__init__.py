"""The benchmark's eval sets: which documents each one's questions ask about (`data/SOURCES.md`)."""

from __future__ import annotations

from pathlib import Path

DATA = Path(__file__).parent
HELP_CENTER = DATA.parent.parent / "examples" / "help-center"  # the demo's own knowledge base, which `make run` serves

# name → (documents, questions). The two help-center sets ask the same documents.
SETS = {
    "s10": (DATA / "s10" / "docs", DATA / "s10" / "questions.jsonl"),
    "stici": (DATA / "stici" / "docs", DATA / "stici" / "questions.jsonl"),
    "help_center": (HELP_CENTER, DATA / "help_center" / "questions.jsonl"),
    "help_center_holdout": (HELP_CENTER, DATA / "help_center" / "holdout.jsonl"),
    # The corpus reserved as unseen: measured, never tuned on (SOURCES.md).
    "smart_tv": (DATA / "smart_tv" / "docs", DATA / "smart_tv" / "questions.jsonl"),
}


def set_files(name: str, data: Path = DATA) -> tuple[Path, Path]:
    """A set's documents folder and question file; a set outside `SETS` is `data/<name>/docs` and
    `data/<name>/questions.jsonl` (a test's own small set)."""
    if data == DATA and name in SETS:
        return SETS[name]
    return data / name / "docs", data / name / "questions.jsonl"
