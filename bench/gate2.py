"""How long gate 2 takes on a long answer resting on a big tool result (it runs on every answer).

    HF_HUB_OFFLINE=1 LITELLM_LOCAL_MODEL_COST_MAP=True .venv/bin/python -m bench.gate2 [--scale N]

A 4,000-character answer (English, Spanish and German sentences with identifiers, dates, amounts and
states, cited and not) against a 16,000-character list of orders, each size times `--scale`; prints the
best of 5 runs of `verify_citations`, cited and uncited. Deterministic input.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass

from gateway.pipeline.citations import verify_citations

SENTENCES = ["Your order A-1003 has shipped and arrives on November 28. ", "The total was $59.90 [1]. ",
             "No, your order A-1010 is not pending: it has shipped. ", "Tu pedido A-1004 ya ha sido enviado. ",
             "Ihre Bestellung A-1005 wurde versandt, und die Zahlung über 59,90 € war erfolgreich. ",
             "You ordered about sixty dollars worth of items, and the 2 mugs at $9.95 each came to $19.90. "]


@dataclass(frozen=True)
class Extract:
    """One retrieved extract, as gate 2 reads it."""

    text: str
    source: str = "billing/refunds.md"
    title: str = "Refunds"
    heading_path: tuple[str, ...] = ()
    url: str | None = None


def orders(chars: int) -> dict:
    """A lookup's result of about `chars` characters of JSON."""
    found: list[dict] = []
    while len(json.dumps(found)) < chars:
        i = len(found)
        found.append({"id": f"A-{1000 + i}", "status": ("shipped", "pending", "delivered")[i % 3],
                      "total": round(5 + i * 7.31 % 295, 2), "paid": i % 2 == 0, "created_at": f"2026-11-{1 + i % 28:02d}",
                      "items": [{"sku": f"SKU-{i}", "quantity": 2, "price": 9.95, "amount_cents": 1990}]})
    return {"orders": found}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--scale", type=int, default=1)
    scale = parser.parse_args().scale
    result, answer = orders(16_000 * scale), ""
    while len(answer) < 4_000 * scale:
        answer += SENTENCES[len(answer) % len(SENTENCES)]
    hits = [Extract("Refunds reach your card in 5 business days.")]
    for cited in (True, False):
        text = answer if cited else answer.replace(" [1]", "")
        best = float("inf")
        for _ in range(5):
            start = time.perf_counter()
            verify_citations(text, hits, fallback_text="FALLBACK", grounding=[result], tool_arguments=[{}],
                             question="Where are my orders?", message="Where are my orders?")
            best = min(best, time.perf_counter() - start)
        print(f"answer {len(text)} chars, result {len(json.dumps(result))} chars, "
              f"{'cited' if cited else 'uncited'}: {best * 1000:.1f} ms")


if __name__ == "__main__":
    main()
