"""The demo invoice tool: authorization in code, and no leak about other people's invoices."""

from __future__ import annotations

import importlib
import json

import pytest

from examples.tools import invoice as invoice_tool
from examples.tools.invoice import DESCRIPTION, INVOICES_FILE, PARAMETERS, invoice_status, normalize_invoice_number
from gateway.models import CallerIdentity


def _who(channel: str, contact: str) -> CallerIdentity:
    return CallerIdentity(bot="acme", channel=channel, contact_external_id=contact)


ALICE = _who("web", "demo-alice-session")
BOB = _who("web", "demo-bob-session")


async def test_invoice_status_owner_reads_own_invoice():
    result = await invoice_status(ALICE, "INV-2025-004217")
    assert result["found"] is True
    assert result["invoice"]["number"] == "INV-2025-004217"
    assert result["invoice"]["status"] == "paid"
    assert result["invoice"]["amount"] == "60.00"
    assert result["invoice"]["currency"] == "USD"


async def test_invoice_status_result_never_includes_owner():
    result = await invoice_status(BOB, "INV-2025-006001")
    assert result["found"] is True
    assert "owner" not in result["invoice"]
    assert "demo-bob-session" not in json.dumps(result)


async def test_invoice_status_other_customers_invoice_is_indistinguishable_from_unknown():
    someone_elses = await invoice_status(BOB, "INV-2025-004217")
    made_up = await invoice_status(BOB, "INV-2025-999999")
    assert someone_elses["found"] is False
    # Same shape and wording; only the echoed number (which the caller typed) differs.
    assert {k: v for k, v in someone_elses.items() if k != "invoice_number"} == {
        k: v for k, v in made_up.items() if k != "invoice_number"
    }
    assert "demo-alice-session" not in json.dumps(someone_elses)
    assert "60.00" not in json.dumps(someone_elses)


async def test_invoice_status_same_contact_id_on_another_channel_is_refused():
    # A Telegram user whose id happens to equal a web session id must not read the web customer's invoice.
    result = await invoice_status(_who("telegram", "demo-alice-session"), "INV-2025-004217")
    assert result["found"] is False


async def test_invoice_status_empty_identity_is_refused():
    result = await invoice_status(_who("web", ""), "INV-2025-004217")
    assert result["found"] is False


@pytest.mark.parametrize(
    ("typed", "expected"),
    [
        ("inv-2025-004217", "INV-2025-004217"),
        ("  #INV-2025-004217 ", "INV-2025-004217"),
        ("INV 2025 004217", "INV-2025-004217"),
        ("INV-2025-4217", None),
        ("DROP TABLE invoices", None),
        ("", None),
    ],
)
def test_normalize_invoice_number_accepts_customer_spellings(typed, expected):
    assert normalize_invoice_number(typed) == expected


async def test_invoice_status_lowercase_number_finds_own_invoice():
    result = await invoice_status(_who("telegram", "100200300"), "inv-2025-007742")
    assert result["found"] is True
    assert result["invoice"]["currency"] == "GBP"


async def test_invoice_status_malformed_number_is_not_found_and_truncated():
    result = await invoice_status(ALICE, "x" * 500)
    assert result["found"] is False
    assert len(result["invoice_number"]) <= 40


def test_invoice_data_every_invoice_has_one_owner_and_a_unique_number():
    invoices = json.loads(INVOICES_FILE.read_text(encoding="utf-8"))["invoices"]
    numbers = [inv["number"] for inv in invoices]
    assert len(numbers) == len(set(numbers))
    for inv in invoices:
        assert normalize_invoice_number(inv["number"]) == inv["number"]
        assert inv["owner"]["channel"] in {"web", "telegram", "slack", "discord", "whatsapp"}
        assert inv["owner"]["contact_external_id"]


def test_invoice_tool_schema_matches_the_function():
    assert PARAMETERS["required"] == ["invoice_number"]
    assert set(PARAMETERS["properties"]) == {"invoice_number"}
    assert "invoice" in DESCRIPTION.lower()
    module_name, _, attr = "examples.tools.invoice:invoice_status".partition(":")
    assert getattr(importlib.import_module(module_name), attr) is invoice_tool.invoice_status
