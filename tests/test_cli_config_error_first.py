"""A config error or a missing file is answered before the heavy imports: a typo fixed and tried again should not wait out
LiteLLM, uvicorn, qdrant-client and fastembed loading (`gateway chat` took 14 s to say one line)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT, write_config

HEAVY = ("litellm", "uvicorn", "qdrant_client", "fastembed")

PROBE = """
import json, sys
from gateway.cli import main
code = main(sys.argv[1:])
print(json.dumps({"code": code, "loaded": [m for m in %r if m in sys.modules]}))
""" % (HEAVY,)


# `db upgrade` reads database_url alone: its config error is a bad one.
@pytest.mark.parametrize("command, mistake, said", [
    *[(command, {"bots": [{"name": "acme", "sytem_prompt": "hi", "channels": {"web": {}}}]},
       "bots[0].sytem_prompt: unknown key; did you mean system_prompt?")
      for command in (["serve", "--port", "1"], ["chat"], ["ingest"])],
    (["db", "upgrade"], {"database_url": "mysql://u@h/db"}, "database_url: unsupported database driver 'mysql'; use "
     "SQLite (sqlite:// or sqlite+aiosqlite://) or PostgreSQL (postgresql:// or postgresql+asyncpg://)"),
])
def test_cli_config_error_comes_before_the_heavy_imports(tmp_path, command, mistake, said):
    config = write_config(tmp_path, **mistake)
    proc = subprocess.run([sys.executable, "-c", PROBE, *command, "--config", str(config)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "HF_HUB_OFFLINE": "1", "LITELLM_LOCAL_MODEL_COST_MAP": "True",
                               "PYTHONPATH": str(ROOT)})
    assert proc.stderr.strip() == f"config error: {said}"
    assert json.loads(proc.stdout) == {"code": 2, "loaded": []}


@pytest.mark.parametrize("missing", ["docs", "questions"])
def test_eval_names_a_missing_folder_or_file_before_the_heavy_imports(tmp_path, missing):
    """A mistyped --docs or --questions was told after qdrant-client, fastembed and the model had loaded
    (7-9 s)."""
    docs, questions = tmp_path / "docs", tmp_path / "q.jsonl"
    if missing != "docs":
        docs.mkdir()
        (docs / "plans.md").write_text("# Plans\n\nPlus costs $6 per month.\n")
    if missing != "questions":
        questions.write_text('{"question": "How much is Plus?", "gold_texts": ["$6 per month"]}\n')
    proc = subprocess.run([sys.executable, "-c", PROBE, "eval", "--docs", str(docs), "--questions", str(questions)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={**{k: v for k, v in os.environ.items() if k != "GATEWAY_CONFIG"},  # make exports it
                               "HF_HUB_OFFLINE": "1", "LITELLM_LOCAL_MODEL_COST_MAP": "True", "PYTHONPATH": str(ROOT)})
    said = {"docs": f"error: knowledge directory not found: {docs}",
            "questions": f"error: cannot read the questions file {questions}: No such file or directory"}
    assert proc.stderr.strip() == said[missing]
    assert json.loads(proc.stdout) == {"code": 1, "loaded": []}
