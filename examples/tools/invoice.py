"""Demo tool: the status of an invoice, by number, for the customer who asks.

Authorization happens here, in code, against the `CallerIdentity` the gateway derived from the
verified channel (never from the model): a customer can read only the invoices owned by their own
(channel, contact_external_id). Someone else's invoice and a non-existent one give the *same*
"not found" result, so the tool never confirms that an invoice number exists.

Wire it in config.yaml:

    tools:
      - name: invoice_status
        type: python
        import_path: examples.tools.invoice:invoice_status
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

from gateway.models import CallerIdentity

INVOICES_FILE = Path(__file__).with_name("invoices.json")

DESCRIPTION = (
    "Look up the status of one of the customer's own invoices by its number (like INV-2025-004217): "
    "paid, open, overdue, payment failed, refunded or void, with amount, currency and dates. "
    "Only invoices that belong to the customer in this conversation can be found."
)

PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "invoice_number": {
            "type": "string",
            "description": "The invoice number exactly as the customer gave it, for example INV-2025-004217.",
        }
    },
    "required": ["invoice_number"],
    "additionalProperties": False,
}

# INV, a four-digit year and a six-digit serial; customers also write it lower-case, with '#' or spaces.
_NUMBER = re.compile(r"^INV-(\d{4})-(\d{6})$")
_PUBLIC_FIELDS = (
    "number", "plan", "amount", "currency", "status", "issued_on", "due_on", "paid_on",
    "refunded_on", "next_retry_on", "payment_method",
)


def normalize_invoice_number(raw: str) -> str | None:
    """`INV-2025-004217` from what a customer typed ('#inv 2025 004217'), or None if it is not one."""
    cleaned = re.sub(r"[\s#]+", "-", str(raw).strip().upper()).strip("-")
    cleaned = re.sub(r"-{2,}", "-", cleaned)
    return cleaned if _NUMBER.fullmatch(cleaned) else None


def _read_invoices(path: Path) -> list[dict[str, Any]]:
    return json.loads(path.read_text(encoding="utf-8"))["invoices"]


def _not_found(number: str) -> dict[str, Any]:
    # Identical for "unknown" and "someone else's", on purpose: the answer must not reveal which.
    return {
        "found": False,
        "invoice_number": number,
        "message": (
            "No invoice with this number was found on your account. Invoice numbers look like "
            "INV-2025-004217 and are listed in Settings → Billing → Invoices."
        ),
    }


def _owned_by(invoice: dict[str, Any], identity: CallerIdentity) -> bool:
    owner = invoice.get("owner") or {}
    return (
        bool(identity.contact_external_id)
        and owner.get("channel") == identity.channel
        and owner.get("contact_external_id") == identity.contact_external_id
    )


async def invoice_status(identity: CallerIdentity, invoice_number: str) -> dict:
    """The caller's own invoice `invoice_number`, or a "not found" result that leaks nothing."""
    number = normalize_invoice_number(invoice_number)
    shown = number or str(invoice_number).strip()[:40]
    if number is None:
        return _not_found(shown)
    invoices = await asyncio.to_thread(_read_invoices, INVOICES_FILE)
    for invoice in invoices:
        if invoice.get("number") == number and _owned_by(invoice, identity):
            public = {key: invoice[key] for key in _PUBLIC_FIELDS if invoice.get(key) is not None}
            return {"found": True, "invoice": public}
    return _not_found(number)
